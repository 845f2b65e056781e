-- Rate counters are per-minute and disposable: an unlogged table skips the
-- write-ahead log, so the admission upsert on the request path never waits for
-- a WAL flush. After a database crash the counters start again at zero, which
-- at worst admits one extra minute's worth of requests.

-- +goose Up
ALTER TABLE rate_counters SET UNLOGGED;

-- +goose Down
ALTER TABLE rate_counters SET LOGGED;
