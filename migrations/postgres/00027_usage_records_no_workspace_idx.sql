-- usage_records loses its (workspace_id, created_at) index (docs/gateway.md,
-- "Usage at scale"). No query of the server reads raw usage rows by
-- workspace: the console, `admin usage` and the budget checks read
-- usage_daily and usage_windows, and the exactly-once check reads
-- usage_records_request_idx. The index cost every request an index entry
-- and its WAL. An operator who queries raw rows by workspace can create it
-- again (CREATE INDEX … ON ONLY usage_records, then CONCURRENTLY per
-- partition and ATTACH PARTITION, or the Down below during a quiet moment).
-- Dropping a partitioned index takes ACCESS EXCLUSIVE on usage_records and
-- its partitions for as long as the catalog change takes (no scan: a
-- moment); PostgreSQL has no DROP INDEX CONCURRENTLY for it.

-- +goose Up
DROP INDEX IF EXISTS usage_records_workspace_idx;

-- +goose Down
-- Builds on every partition while usage writes wait.
CREATE INDEX IF NOT EXISTS usage_records_workspace_idx ON usage_records (workspace_id, created_at);
