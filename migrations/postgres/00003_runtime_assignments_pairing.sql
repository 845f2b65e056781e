-- A project is pinned to one runtime at a time (spec 10.1.1); the
-- assignment records which driver runs it (local, kubernetes or a paired
-- machine). Pairing tokens let `podagent paired` dial in; only the SHA-256 of
-- a token's secret part is stored.

-- +goose Up
CREATE TABLE runtime_assignments (
    project_id      text PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
    driver          text NOT NULL,
    endpoint        text NOT NULL DEFAULT '',
    instance        text NOT NULL DEFAULT '',
    cloud_sync_mode text NOT NULL DEFAULT '',
    assigned_at     timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pairing_tokens (
    id                text PRIMARY KEY,
    project_id        text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name              text NOT NULL DEFAULT '',
    prefix            text NOT NULL,
    token_hash        text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_connected_at timestamptz,
    revoked_at        timestamptz
);
CREATE INDEX pairing_tokens_project_idx ON pairing_tokens (project_id);

-- +goose Down
DROP TABLE pairing_tokens;
DROP TABLE runtime_assignments;
