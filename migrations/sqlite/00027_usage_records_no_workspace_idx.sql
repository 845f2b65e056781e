-- usage_records loses its (workspace_id, created_at) index, as on PostgreSQL:
-- no query of the server reads raw usage rows by workspace (usage_daily and
-- usage_windows hold what is read), and each request paid an index entry.

-- +goose Up
DROP INDEX IF EXISTS usage_records_workspace_idx;

-- +goose Down
CREATE INDEX IF NOT EXISTS usage_records_workspace_idx ON usage_records (workspace_id, created_at);
