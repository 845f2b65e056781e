-- A model may list several deployments (fallbacks); each usage
-- record names the deployment (provider/upstream_model) that answered.
-- Records written before this migration have the empty string.

-- +goose Up
ALTER TABLE usage_records ADD COLUMN deployment TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE usage_records DROP COLUMN deployment;
