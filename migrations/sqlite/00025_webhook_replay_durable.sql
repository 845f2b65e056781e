-- A range replay's pending sends live on the outbox rows it replays
-- (docs/webhook-delivery.md "Recovery: replaying a range"): replay_at is set
-- while a row waits for its replay attempt, replay_url and replay_webhook_id
-- are where and as what it is sent, replay_lease_until and replay_owner the
-- claim of the replica sending it. A replica stopped mid-replay leaves the
-- rest to the others once its leases ran out.

-- +goose Up
ALTER TABLE webhook_outbox ADD COLUMN replay_at datetime;
ALTER TABLE webhook_outbox ADD COLUMN replay_lease_until datetime;
ALTER TABLE webhook_outbox ADD COLUMN replay_owner text NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN replay_url text NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN replay_webhook_id text NOT NULL DEFAULT '';
CREATE INDEX webhook_outbox_replay_idx ON webhook_outbox (replay_at) WHERE replay_at IS NOT NULL;

-- +goose Down
DROP INDEX webhook_outbox_replay_idx;
ALTER TABLE webhook_outbox DROP COLUMN replay_webhook_id;
ALTER TABLE webhook_outbox DROP COLUMN replay_url;
ALTER TABLE webhook_outbox DROP COLUMN replay_owner;
ALTER TABLE webhook_outbox DROP COLUMN replay_lease_until;
ALTER TABLE webhook_outbox DROP COLUMN replay_at;
