-- +goose NO TRANSACTION
-- Usage records are written exactly once: a retried batch looks its request
-- ids up first (store.RecordUsageBatch). Built without blocking writes.

-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS usage_records_request_idx ON usage_records (request_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS usage_records_request_idx;
