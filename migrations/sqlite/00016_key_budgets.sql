-- An optional credit budget per API key, with its own
-- window (daily and monthly reset at 00:00 UTC, on the 1st for monthly;
-- lifetime never resets). One row per budgeted key holds the limit and the
-- live counter: credits of the current window, the reservations of
-- requests in flight (admission and settlement are single conditional
-- UPDATEs on this row; see docs/gateway.md, "Budgets per API key"), and the
-- largest cost of one request seen, the reservation estimate.

-- +goose Up
CREATE TABLE key_budgets (
    key_id            TEXT PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
    limit_micro       BIGINT NOT NULL CHECK (limit_micro > 0),
    budget_window     TEXT NOT NULL CHECK (budget_window IN ('daily', 'monthly', 'lifetime')),
    resets_at         BIGINT NOT NULL DEFAULT 0,
    credits_micro     BIGINT NOT NULL DEFAULT 0,
    inflight          BIGINT NOT NULL DEFAULT 0,
    reserved_until    BIGINT NOT NULL DEFAULT 0,
    max_request_micro BIGINT NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE key_budgets;
