-- Webhook delivery that operators can see and steer
-- (docs/webhook-delivery.md): every callback attempt of every async message
-- (kept for a bounded retention, SVC_WEBHOOK_ATTEMPT_RETENTION), the health
-- of each callback endpoint (consecutive failures; failing after a period,
-- then replies go straight to the outbox), and the channel secret a
-- rotation replaced, still accepted and signed with until its overlap ends.

-- +goose Up
CREATE TABLE webhook_attempts (
    id             text PRIMARY KEY,
    project_id     text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    channel_id     text NOT NULL,
    correlation_id text NOT NULL,
    webhook_id     text NOT NULL,
    kind           text NOT NULL,
    attempt        integer NOT NULL,
    url            text NOT NULL,
    endpoint       text NOT NULL,
    attempted_at   timestamptz NOT NULL,
    latency_ms     bigint NOT NULL DEFAULT 0,
    status_code    integer NOT NULL DEFAULT 0,
    error          text NOT NULL DEFAULT '',
    response_head  text NOT NULL DEFAULT '',
    next_retry_at  timestamptz,
    outcome        text NOT NULL
);
CREATE INDEX webhook_attempts_list_idx ON webhook_attempts (project_id, attempted_at, id);
CREATE INDEX webhook_attempts_message_idx ON webhook_attempts (project_id, correlation_id);
CREATE INDEX webhook_attempts_retention_idx ON webhook_attempts (attempted_at);

CREATE TABLE webhook_endpoints (
    project_id           text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    endpoint             text NOT NULL,
    consecutive_failures integer NOT NULL DEFAULT 0,
    failing_since        timestamptz,
    disabled_at          timestamptz,
    last_error           text NOT NULL DEFAULT '',
    last_attempt_at      timestamptz NOT NULL,
    PRIMARY KEY (project_id, endpoint)
);

ALTER TABLE channels ADD COLUMN previous_secret text NOT NULL DEFAULT '';
ALTER TABLE channels ADD COLUMN previous_secret_expires_at timestamptz;

-- +goose Down
ALTER TABLE channels DROP COLUMN previous_secret_expires_at;
ALTER TABLE channels DROP COLUMN previous_secret;
DROP TABLE webhook_endpoints;
DROP TABLE webhook_attempts;
