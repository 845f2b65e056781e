-- Budget leases (docs/gateway.md, "Budgets per API key"): a replica leases
-- a block of a key's budget in one conditional UPDATE and admits requests
-- from it locally. leased_micro is the credits leased and not yet spent or
-- returned, across replicas; leased_until is when they lapse if never
-- returned (a crashed replica's).

-- +goose Up
ALTER TABLE key_budgets ADD COLUMN leased_micro BIGINT NOT NULL DEFAULT 0;
ALTER TABLE key_budgets ADD COLUMN leased_until BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE key_budgets DROP COLUMN leased_until;
ALTER TABLE key_budgets DROP COLUMN leased_micro;
