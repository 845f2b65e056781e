-- A webhook channel may sign callbacks with an ed25519 key too (Standard
-- Webhooks "v1a", docs/webhook-delivery.md "Asymmetric signatures"): the
-- whsk_ key, empty when the channel signs with its HMAC secret only.

-- +goose Up
ALTER TABLE channels ADD COLUMN signing_key text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE channels DROP COLUMN signing_key;
