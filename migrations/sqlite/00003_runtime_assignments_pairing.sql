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
    assigned_at     datetime NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at      datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE pairing_tokens (
    id                text PRIMARY KEY,
    project_id        text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name              text NOT NULL DEFAULT '',
    prefix            text NOT NULL,
    token_hash        text NOT NULL,
    created_at        datetime NOT NULL DEFAULT CURRENT_TIMESTAMP,
    last_connected_at datetime,
    revoked_at        datetime
);
CREATE INDEX pairing_tokens_project_idx ON pairing_tokens (project_id);

-- +goose Down
DROP TABLE pairing_tokens;
DROP TABLE runtime_assignments;
