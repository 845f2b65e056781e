-- The API owns the long tail of async callbacks (docs/webhook-delivery.md
-- "The API's delivery queue"): a reply the pod handed over after its own
-- attempts failed is queued on its outbox row and delivered by the API's
-- replicas on a multi-day schedule. The queue lives on the outbox row
-- itself, so taking the reply from the outbox and cancelling its delivery
-- are one statement. next_attempt_at is set while queued; lease_until and
-- lease_owner are the claim of one replica (a row under lease is neither
-- claimed by another replica nor served by an outbox poll); callback_url,
-- webhook_id and attempt_base are what the attempt log knew of the pod's
-- attempts; queue_state says how the queue ended (queued, delivered,
-- taken, exhausted, stopped).

-- +goose Up
ALTER TABLE webhook_outbox ADD COLUMN next_attempt_at datetime;
ALTER TABLE webhook_outbox ADD COLUMN lease_until datetime;
ALTER TABLE webhook_outbox ADD COLUMN lease_owner text NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN queue_state text NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN queue_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE webhook_outbox ADD COLUMN attempt_base integer NOT NULL DEFAULT 0;
ALTER TABLE webhook_outbox ADD COLUMN callback_url text NOT NULL DEFAULT '';
ALTER TABLE webhook_outbox ADD COLUMN webhook_id text NOT NULL DEFAULT '';
CREATE INDEX webhook_outbox_queue_idx ON webhook_outbox (next_attempt_at) WHERE next_attempt_at IS NOT NULL;

-- +goose Down
DROP INDEX webhook_outbox_queue_idx;
ALTER TABLE webhook_outbox DROP COLUMN webhook_id;
ALTER TABLE webhook_outbox DROP COLUMN callback_url;
ALTER TABLE webhook_outbox DROP COLUMN attempt_base;
ALTER TABLE webhook_outbox DROP COLUMN queue_attempts;
ALTER TABLE webhook_outbox DROP COLUMN queue_state;
ALTER TABLE webhook_outbox DROP COLUMN lease_owner;
ALTER TABLE webhook_outbox DROP COLUMN lease_until;
ALTER TABLE webhook_outbox DROP COLUMN next_attempt_at;
