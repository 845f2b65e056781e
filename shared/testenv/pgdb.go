package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Template is a migrated database that test databases are cloned from
// (coder's dbtestutil pattern). Hash identifies the migrations (for
// example a hash of the embedded SQL files): a new Hash gives a new
// template, so a changed schema never reuses a stale one.
type Template struct {
	Name    string
	Hash    string
	Migrate func(ctx context.Context, db *sql.DB) error
}

// adminState is the process-wide admin connection (and the server behind
// it when this process started one).
var admin struct {
	once sync.Once
	url  string
	db   *sql.DB
	err  error

	mu        sync.Mutex
	templates map[string]*templateState
}

type templateState struct {
	once sync.Once
	err  error
}

// PostgresAdminURL returns the admin URL of the test Postgres server:
// $SVC_TEST_DATABASE_URL, or a server started for this process.
func PostgresAdminURL(t testing.TB) string {
	t.Helper()
	url, _ := adminDB(t)
	return url
}

func adminDB(t testing.TB) (string, *sql.DB) {
	t.Helper()
	admin.once.Do(func() {
		admin.url = os.Getenv(EnvDatabaseURL)
		if admin.url == "" {
			srv, err := StartPostgres(context.Background())
			if err != nil {
				admin.err = err
				return
			}
			onTeardown(srv.Stop)
			admin.url = srv.URL()
		}
		if _, err := withDatabase(admin.url, "x"); err != nil {
			admin.err = err
			return
		}
		db, err := sql.Open("pgx", admin.url)
		if err != nil {
			admin.err = fmt.Errorf("testenv: open admin connection: %w", err)
			return
		}
		db.SetMaxIdleConns(2)
		admin.db = db
		onTeardown(func() { db.Close() })
	})
	if admin.err != nil {
		t.Fatalf("testenv: no Postgres: %v", admin.err)
	}
	return admin.url, admin.db
}

// PostgresDB returns the URL of a new database, a clone of tmpl's template
// (migrated once per server), dropped when the test ends.
func PostgresDB(t testing.TB, tmpl Template) string {
	t.Helper()
	adminURL, db := adminDB(t)
	tmplName := templateName(tmpl)

	admin.mu.Lock()
	if admin.templates == nil {
		admin.templates = map[string]*templateState{}
	}
	st := admin.templates[tmplName]
	if st == nil {
		st = &templateState{}
		admin.templates[tmplName] = st
	}
	admin.mu.Unlock()
	st.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		st.err = ensureTemplate(ctx, db, adminURL, tmplName, tmpl.Migrate)
	})
	if st.err != nil {
		t.Fatalf("testenv: template %s: %v", tmplName, st.err)
	}

	name := "t_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", quoteIdent(name), quoteIdent(tmplName))
	err := pollUntil(ctx, 30*time.Second, nil, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, create)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			return err // template briefly in use (another server user): retry
		}
		if err != nil {
			return stopPolling{err}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: %s: %v", create, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", quoteIdent(name))); err != nil {
			t.Errorf("testenv: drop test database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(adminURL, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// stopPolling makes pollUntil's probe give up at once: it is returned by
// probes for errors that retrying will not fix.
type stopPolling struct{ err error }

func (s stopPolling) Error() string { return s.err.Error() }

// templateName is tmpl_<name>_<hash>, sanitised and within Postgres's 63
// bytes.
func templateName(tmpl Template) string {
	clean := func(s string, max int) string {
		var b strings.Builder
		for _, r := range strings.ToLower(s) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
		out := b.String()
		if len(out) > max {
			out = out[:max]
		}
		return out
	}
	hash := clean(tmpl.Hash, 24)
	if hash == "" {
		hash = "0"
	}
	return "tmpl_" + clean(tmpl.Name, 30) + "_" + hash
}

// ensureTemplate creates and migrates the template database name unless it
// exists, under a session advisory lock so parallel test binaries sharing
// one server migrate it once. A complete template is marked IS_TEMPLATE
// and closed to connections; a leftover without the mark (a crash
// mid-migration) is dropped and rebuilt.
func ensureTemplate(ctx context.Context, db *sql.DB, adminURL, name string, migrate func(context.Context, *sql.DB) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	h := fnv.New64a()
	h.Write([]byte("svc-testenv-template:" + name))
	key := int64(h.Sum64())
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return fmt.Errorf("advisory lock: %w", err)
	}
	defer conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1)", key)

	var isTemplate bool
	err = conn.QueryRowContext(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return nil
	case err == nil:
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("DROP DATABASE %s WITH (FORCE)", quoteIdent(name))); err != nil {
			return fmt.Errorf("drop incomplete template: %w", err)
		}
	case !errors.Is(err, sql.ErrNoRows):
		return err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE DATABASE %s", quoteIdent(name))); err != nil {
		return err
	}
	if migrate != nil {
		dsn, err := withDatabase(adminURL, name)
		if err != nil {
			return err
		}
		tdb, err := sql.Open("pgx", dsn)
		if err != nil {
			return err
		}
		err = migrate(ctx, tdb)
		tdb.Close()
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for _, stmt := range []string{"ALTER DATABASE %s IS_TEMPLATE true", "ALTER DATABASE %s ALLOW_CONNECTIONS false"} {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(stmt, quoteIdent(name))); err != nil {
			return err
		}
	}
	return nil
}
