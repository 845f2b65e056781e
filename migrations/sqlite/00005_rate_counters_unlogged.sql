-- PostgreSQL makes rate_counters unlogged here; SQLite has no such notion.
-- The version exists so both histories keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
