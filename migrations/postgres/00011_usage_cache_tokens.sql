-- Cache-aware pricing. A usage record keeps the prompt tokens
-- the provider read from its prompt cache and those it wrote to it, on
-- their own (both are part of prompt_tokens). Records written before this
-- migration have 0.

-- +goose Up
ALTER TABLE usage_records ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE usage_records DROP COLUMN cache_write_tokens;
ALTER TABLE usage_records DROP COLUMN cached_tokens;
