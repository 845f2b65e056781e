-- The web console (DESIGN.md §7 "console"): users sign in with a
-- password (argon2id, PHC string; empty means none set) or a one-time link,
-- and hold server-side sessions. Only SHA-256 hashes of session tokens and
-- sign-in link tokens are stored. Membership roles are owner or member; only
-- owners manage keys and channels.

-- +goose Up
ALTER TABLE users ADD COLUMN password_hash text NOT NULL DEFAULT '';

ALTER TABLE memberships ADD CONSTRAINT memberships_role_check CHECK (role IN ('owner', 'member'));

CREATE TABLE console_sessions (
    token_hash   text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX console_sessions_user_idx ON console_sessions (user_id);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);

CREATE TABLE login_tokens (
    token_hash text PRIMARY KEY,
    user_id    text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX login_tokens_expires_idx ON login_tokens (expires_at);

-- +goose Down
DROP TABLE login_tokens;
DROP TABLE console_sessions;
ALTER TABLE memberships DROP CONSTRAINT memberships_role_check;
ALTER TABLE users DROP COLUMN password_hash;
