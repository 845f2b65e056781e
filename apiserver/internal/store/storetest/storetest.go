// Package storetest gives tests a migrated store on a real database: a
// PostgreSQL database cloned from a migrated template (shared/testenv), or a
// fresh SQLite file.
package storetest

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/testenv"
)

// PostgresURL returns the URL of a fresh, migrated database of its own.
func PostgresURL(t testing.TB) string {
	t.Helper()
	hash, err := migrations.Hash(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.PostgresDB(t, testenv.Template{Name: "apiserver", Hash: hash,
		Migrate: func(ctx context.Context, db *sql.DB) error { return migrations.Up(ctx, migrations.Postgres, db) }})
}

// Postgres opens a store on a fresh migrated Postgres database.
func Postgres(t testing.TB) *store.Store {
	t.Helper()
	return open(t, PostgresURL(t), "")
}

// SQLite opens a store on a fresh migrated SQLite file.
func SQLite(t testing.TB) *store.Store {
	t.Helper()
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "test.db"), dir)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func open(t testing.TB, url, dir string) *store.Store {
	s, err := store.Open(url, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Each runs fn against both dialects as subtests.
func Each(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, Postgres(t)) })
}

// EachWith is Each with a fixture: setup builds it on each dialect's store,
// and test receives it.
func EachWith[F any](t *testing.T, setup func(*testing.T, *store.Store) F, test func(t *testing.T, f F)) {
	Each(t, func(t *testing.T, s *store.Store) { test(t, setup(t, s)) })
}

// Projects creates a free workspace with one project per name, in order.
func Projects(t testing.TB, s *store.Store, names ...string) []store.Project {
	t.Helper()
	ctx := context.Background()
	ws, err := s.CreateWorkspace(ctx, "w", "free")
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]store.Project, len(names))
	for i, name := range names {
		if ps[i], err = s.CreateProject(ctx, ws.ID, name); err != nil {
			t.Fatal(err)
		}
	}
	return ps
}
