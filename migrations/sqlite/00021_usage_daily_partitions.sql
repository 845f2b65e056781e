-- Usage at scale (docs/gateway.md, "Usage at scale"): usage_daily, one row
-- per workspace, UTC day, model and deployment, kept in the same
-- transaction as the records; the console's usage page and `admin usage
-- show` read it. SQLite keeps usage_records as one table.

-- +goose Up
CREATE TABLE usage_daily (
    workspace_id       TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    day                TEXT NOT NULL,
    model              TEXT NOT NULL,
    deployment         TEXT NOT NULL DEFAULT '',
    requests           INTEGER NOT NULL DEFAULT 0,
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,
    completion_tokens  INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    cached_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    credits_micro      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, day, model, deployment)
);
INSERT INTO usage_daily (workspace_id, day, model, deployment, requests, prompt_tokens, completion_tokens,
    reasoning_tokens, cached_tokens, cache_write_tokens, credits_micro)
SELECT workspace_id, substr(created_at, 1, 10), model, deployment, count(*),
    sum(prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cached_tokens),
    sum(cache_write_tokens), sum(credits_micro)
FROM usage_records GROUP BY 1, 2, 3, 4;

-- +goose Down
DROP TABLE usage_daily;
