-- +goose Up
CREATE TABLE workspaces (
    id                  text PRIMARY KEY,
    name                text NOT NULL,
    plan                text NOT NULL DEFAULT 'free',
    usage_based_pricing boolean NOT NULL DEFAULT false,
    created_at          datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE users (
    id         text PRIMARY KEY,
    email      text NOT NULL UNIQUE,
    created_at datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE memberships (
    workspace_id text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    user_id      text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    role         text NOT NULL DEFAULT 'member',
    created_at   datetime NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (workspace_id, user_id)
);

-- Only the SHA-256 of the secret part of a key is stored (DESIGN.md, security).
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    workspace_id text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    user_id      text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '',
    prefix       text NOT NULL,
    key_hash     text NOT NULL,
    created_at   datetime NOT NULL DEFAULT CURRENT_TIMESTAMP,
    last_used_at datetime,
    revoked_at   datetime
);
CREATE INDEX api_keys_workspace_idx ON api_keys (workspace_id);

CREATE TABLE usage_records (
    id                integer PRIMARY KEY AUTOINCREMENT,
    request_id        text NOT NULL,
    workspace_id      text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    api_key_id        text,
    project_id        text,
    model             text NOT NULL,
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens  bigint NOT NULL DEFAULT 0,
    credits_micro     bigint NOT NULL DEFAULT 0,
    streamed          boolean NOT NULL DEFAULT false,
    created_at        datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX usage_records_workspace_idx ON usage_records (workspace_id, created_at);

-- One running counter per workspace and plan window; times in unix milliseconds.
CREATE TABLE usage_windows (
    workspace_id  text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    window_name   text NOT NULL,
    started_at    bigint NOT NULL,
    resets_at     bigint NOT NULL,
    credits_micro bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, window_name)
);

-- Fixed one-minute request counters shared by every replica.
CREATE TABLE rate_counters (
    bucket       text NOT NULL,
    window_start bigint NOT NULL,
    count        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, window_start)
);

CREATE TABLE projects (
    id                   text PRIMARY KEY,
    workspace_id         text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name                 text NOT NULL,
    cloud_sync_mode      text NOT NULL DEFAULT 's3'
                         CHECK (cloud_sync_mode IN ('s3', 'dual_shadow', 'git_only')),
    published_commit_sha text NOT NULL DEFAULT '',
    published_tag        text NOT NULL DEFAULT '',
    created_at           datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX projects_workspace_idx ON projects (workspace_id);

CREATE TABLE project_checkpoints (
    id            text PRIMARY KEY,
    project_id    text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    commit_sha    text NOT NULL,
    parent_sha    text NOT NULL DEFAULT '',
    message       text NOT NULL DEFAULT '',
    author        text NOT NULL DEFAULT '',
    branch        text NOT NULL DEFAULT '',
    files_changed integer NOT NULL DEFAULT 0,
    additions     integer NOT NULL DEFAULT 0,
    deletions     integer NOT NULL DEFAULT 0,
    source        text NOT NULL DEFAULT 'pod',
    reconciled    boolean NOT NULL DEFAULT false,
    committed_at  datetime,
    created_at    datetime NOT NULL DEFAULT CURRENT_TIMESTAMP,
    UNIQUE (project_id, commit_sha)
);
CREATE INDEX project_checkpoints_created_idx ON project_checkpoints (project_id, created_at);

CREATE TABLE channels (
    id               text PRIMARY KEY,
    project_id       text NOT NULL UNIQUE REFERENCES projects(id) ON DELETE CASCADE,
    secret           text NOT NULL DEFAULT '',
    callback_headers text NOT NULL DEFAULT '{}',
    updated_at       datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- +goose Down
DROP TABLE channels;
DROP TABLE project_checkpoints;
DROP TABLE projects;
DROP TABLE rate_counters;
DROP TABLE usage_windows;
DROP TABLE usage_records;
DROP TABLE api_keys;
DROP TABLE memberships;
DROP TABLE users;
DROP TABLE workspaces;
