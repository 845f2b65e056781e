-- Spec 9: the sync-mode default flips from s3 to git_only. Existing s3 rows
-- are backfilled to git_only; dual_shadow rows are left unchanged.

-- +goose Up
ALTER TABLE projects ALTER COLUMN cloud_sync_mode SET DEFAULT 'git_only';
UPDATE projects SET cloud_sync_mode = 'git_only' WHERE cloud_sync_mode = 's3';

-- +goose Down
-- The backfill cannot be told apart from rows set by hand; only the default returns.
ALTER TABLE projects ALTER COLUMN cloud_sync_mode SET DEFAULT 's3';
