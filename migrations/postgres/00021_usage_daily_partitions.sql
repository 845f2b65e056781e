-- Usage at scale (docs/gateway.md, "Usage at scale").
-- 1. usage_daily: one row per workspace, UTC day, model and deployment, kept
--    in the same transaction as the records; the console's usage page and
--    `admin usage show` read it instead of scanning usage_records.
-- 2. usage_records becomes a table partitioned by day on created_at: the
--    existing table is attached as its first partition (every row before
--    tomorrow); the API server creates the days ahead (and a missing day
--    before it writes to it) and drops the days past SVC_USAGE_RETENTION
--    (store.MaintainUsagePartitions). No default partition: it would
--    forbid DETACH … CONCURRENTLY.

-- +goose Up
CREATE TABLE usage_daily (
    workspace_id       text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    day                text NOT NULL, -- YYYY-MM-DD, UTC
    model              text NOT NULL,
    deployment         text NOT NULL DEFAULT '',
    requests           bigint NOT NULL DEFAULT 0,
    prompt_tokens      bigint NOT NULL DEFAULT 0,
    completion_tokens  bigint NOT NULL DEFAULT 0,
    reasoning_tokens   bigint NOT NULL DEFAULT 0,
    cached_tokens      bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    credits_micro      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, day, model, deployment)
);
INSERT INTO usage_daily (workspace_id, day, model, deployment, requests, prompt_tokens, completion_tokens,
    reasoning_tokens, cached_tokens, cache_write_tokens, credits_micro)
SELECT workspace_id, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), model, deployment, count(*),
    sum(prompt_tokens), sum(completion_tokens), sum(reasoning_tokens), sum(cached_tokens),
    sum(cache_write_tokens), sum(credits_micro)
FROM usage_records GROUP BY 1, 2, 3, 4;

ALTER TABLE usage_records RENAME TO usage_records_legacy;
ALTER INDEX usage_records_workspace_idx RENAME TO usage_records_legacy_workspace_idx;
ALTER INDEX usage_records_request_idx RENAME TO usage_records_legacy_request_idx;
ALTER TABLE usage_records_legacy DROP CONSTRAINT usage_records_pkey;
CREATE TABLE usage_records (
    id                 bigint NOT NULL DEFAULT nextval('usage_records_id_seq'),
    request_id         text NOT NULL,
    workspace_id       text NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    api_key_id         text,
    project_id         text,
    model              text NOT NULL,
    prompt_tokens      bigint NOT NULL DEFAULT 0,
    completion_tokens  bigint NOT NULL DEFAULT 0,
    reasoning_tokens   bigint NOT NULL DEFAULT 0,
    credits_micro      bigint NOT NULL DEFAULT 0,
    streamed           boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    deployment         text NOT NULL DEFAULT '',
    cached_tokens      bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE usage_records_id_seq OWNED BY usage_records.id;
CREATE INDEX usage_records_workspace_idx ON usage_records (workspace_id, created_at);
CREATE INDEX usage_records_request_idx ON usage_records (request_id);
-- +goose StatementBegin
DO $$
DECLARE tomorrow timestamptz := date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 day';
BEGIN
  EXECUTE format('ALTER TABLE usage_records ATTACH PARTITION usage_records_legacy FOR VALUES FROM (MINVALUE) TO (%L)', tomorrow);
END $$;
-- +goose StatementEnd

-- +goose Down
CREATE TABLE usage_records_flat (LIKE usage_records INCLUDING DEFAULTS);
INSERT INTO usage_records_flat SELECT * FROM usage_records;
ALTER SEQUENCE usage_records_id_seq OWNED BY NONE;
DROP TABLE usage_records;
ALTER TABLE usage_records_flat RENAME TO usage_records;
ALTER SEQUENCE usage_records_id_seq OWNED BY usage_records.id;
ALTER TABLE usage_records ADD PRIMARY KEY (id);
ALTER TABLE usage_records ADD FOREIGN KEY (workspace_id) REFERENCES workspaces(id) ON DELETE CASCADE;
CREATE INDEX usage_records_workspace_idx ON usage_records (workspace_id, created_at);
CREATE INDEX usage_records_request_idx ON usage_records (request_id);
DROP TABLE usage_daily;
