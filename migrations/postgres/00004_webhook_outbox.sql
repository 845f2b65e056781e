-- Durable webhook outbox (spec 4.2, DESIGN.md §6): replies of sync requests
-- that timed out and async replies whose callback gave up. The pod posts
-- each one here (POST /internal/projects/{id}/outbox, idempotent on the
-- correlation id); integrations long-poll them from the API, which marks
-- what it returned as delivered. Delivered rows stay so that a pod retrying
-- an already accepted message cannot deliver it twice.

-- +goose Up
CREATE TABLE webhook_outbox (
    id             text PRIMARY KEY,
    project_id     text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    channel_id     text NOT NULL,
    correlation_id text NOT NULL,
    reply          text NOT NULL,
    metadata       text NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL,
    accepted_at    timestamptz NOT NULL DEFAULT now(),
    delivered_at   timestamptz,
    UNIQUE (project_id, correlation_id)
);
CREATE INDEX webhook_outbox_pending_idx ON webhook_outbox (project_id, channel_id, delivered_at, created_at);

-- +goose Down
DROP TABLE webhook_outbox;
