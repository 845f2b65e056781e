-- Usage records are written exactly once: a retried batch looks its request
-- ids up first (store.RecordUsageBatch).

-- +goose Up
CREATE INDEX IF NOT EXISTS usage_records_request_idx ON usage_records (request_id);

-- +goose Down
DROP INDEX IF EXISTS usage_records_request_idx;
