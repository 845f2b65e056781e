-- Spec 9: the sync-mode default flips from s3 to git_only. Existing s3 rows
-- are backfilled to git_only; dual_shadow rows are left unchanged.
-- SQLite cannot change a column default in place, so the table is rebuilt.

-- +goose NO TRANSACTION
-- +goose Up
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE projects_new (
    id                   text PRIMARY KEY,
    workspace_id         text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name                 text NOT NULL,
    cloud_sync_mode      text NOT NULL DEFAULT 'git_only'
                         CHECK (cloud_sync_mode IN ('s3', 'dual_shadow', 'git_only')),
    published_commit_sha text NOT NULL DEFAULT '',
    published_tag        text NOT NULL DEFAULT '',
    created_at           datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO projects_new
SELECT id, workspace_id, name,
       CASE cloud_sync_mode WHEN 's3' THEN 'git_only' ELSE cloud_sync_mode END,
       published_commit_sha, published_tag, created_at
FROM projects;
DROP TABLE projects;
ALTER TABLE projects_new RENAME TO projects;
CREATE INDEX projects_workspace_idx ON projects (workspace_id);
COMMIT;
PRAGMA foreign_keys = ON;

-- +goose Down
-- Mirrors Postgres: the default returns to s3 (the table is rebuilt); the
-- backfill cannot be told apart from rows set by hand, so rows stay.
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE projects_old (
    id                   text PRIMARY KEY,
    workspace_id         text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name                 text NOT NULL,
    cloud_sync_mode      text NOT NULL DEFAULT 's3'
                         CHECK (cloud_sync_mode IN ('s3', 'dual_shadow', 'git_only')),
    published_commit_sha text NOT NULL DEFAULT '',
    published_tag        text NOT NULL DEFAULT '',
    created_at           datetime NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO projects_old
SELECT id, workspace_id, name, cloud_sync_mode, published_commit_sha, published_tag, created_at
FROM projects;
DROP TABLE projects;
ALTER TABLE projects_old RENAME TO projects;
CREATE INDEX projects_workspace_idx ON projects (workspace_id);
COMMIT;
PRAGMA foreign_keys = ON;
