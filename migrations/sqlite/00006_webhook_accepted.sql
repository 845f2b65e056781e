-- Accepted async webhook messages are recorded by the API (DESIGN.md
-- §7): the agent-proxy writes a row in status 'accepted' with a deadline when
-- the pod answers 202; the pod's reply (outbox) or its delivery notice
-- ('delivered') closes it; an outbox poll returns a row still 'accepted'
-- after its deadline as 'unanswered', so an accepted message never silently
-- vanishes, also when the pod's disk is gone. Existing rows are replies.

-- +goose Up
ALTER TABLE webhook_outbox ADD COLUMN status text NOT NULL DEFAULT 'replied';
ALTER TABLE webhook_outbox ADD COLUMN deadline_at datetime;

-- +goose Down
ALTER TABLE webhook_outbox DROP COLUMN deadline_at;
ALTER TABLE webhook_outbox DROP COLUMN status;
