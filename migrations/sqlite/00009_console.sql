-- The web console (DESIGN.md §7 "console"): users sign in with a
-- password (argon2id, PHC string; empty means none set) or a one-time link,
-- and hold server-side sessions. Only SHA-256 hashes of session tokens and
-- sign-in link tokens are stored. Membership roles are owner or member; only
-- owners manage keys and channels (SQLite cannot add a CHECK to an existing
-- table, so two triggers enforce it).

-- +goose Up
ALTER TABLE users ADD COLUMN password_hash text NOT NULL DEFAULT '';

-- +goose StatementBegin
CREATE TRIGGER memberships_role_check_insert BEFORE INSERT ON memberships
WHEN NEW.role NOT IN ('owner', 'member')
BEGIN SELECT RAISE(ABORT, 'memberships_role_check'); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER memberships_role_check_update BEFORE UPDATE OF role ON memberships
WHEN NEW.role NOT IN ('owner', 'member')
BEGIN SELECT RAISE(ABORT, 'memberships_role_check'); END;
-- +goose StatementEnd

CREATE TABLE console_sessions (
    token_hash   text PRIMARY KEY,
    user_id      text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token   text NOT NULL,
    created_at   datetime NOT NULL,
    last_seen_at datetime NOT NULL,
    expires_at   datetime NOT NULL
);
CREATE INDEX console_sessions_user_idx ON console_sessions (user_id);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);

CREATE TABLE login_tokens (
    token_hash text PRIMARY KEY,
    user_id    text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at datetime NOT NULL,
    expires_at datetime NOT NULL,
    used_at    datetime
);
CREATE INDEX login_tokens_expires_idx ON login_tokens (expires_at);

-- +goose Down
DROP TABLE login_tokens;
DROP TABLE console_sessions;
DROP TRIGGER memberships_role_check_update;
DROP TRIGGER memberships_role_check_insert;
ALTER TABLE users DROP COLUMN password_hash;
