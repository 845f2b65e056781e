package migrations_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"

	_ "github.com/glebarez/go-sqlite"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// emptyPostgres returns a database with no migrations applied.
func emptyPostgres(t *testing.T) *sql.DB {
	url := testenv.PostgresDB(t, testenv.Template{Name: "empty", Hash: "0",
		Migrate: func(context.Context, *sql.DB) error { return nil }})
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func emptySQLite(t *testing.T) *sql.DB {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

type dialectCase struct {
	d    migrations.Dialect
	open func(t *testing.T) *sql.DB
	ph   func(i int) string
}

var dialects = []dialectCase{
	{migrations.Postgres, emptyPostgres, func(i int) string { return "$" + string(rune('0'+i)) }},
	{migrations.SQLite, emptySQLite, func(int) string { return "?" }},
}

// eachDialect runs test as a subtest per dialect, on an empty database.
func eachDialect(t *testing.T, test func(t *testing.T, dc dialectCase, db *sql.DB)) {
	for _, dc := range dialects {
		t.Run(string(dc.d), func(t *testing.T) { test(t, dc, dc.open(t)) })
	}
}

// The default flip of spec 9: s3 rows become git_only, dual_shadow rows stay,
// and new rows default to git_only; rows that point at projects survive the
// SQLite table rebuild.
func TestSyncModeFlipBackfill(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, dc dialectCase, db *sql.DB) {
		ctx := context.Background()
		if err := migrations.UpTo(ctx, dc.d, db, 1); err != nil {
			t.Fatal(err)
		}
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec("INSERT INTO workspaces (id, name) VALUES ('ws1', 'w')")
		exec("INSERT INTO projects (id, workspace_id, name) VALUES ('p_default', 'ws1', 'a')")
		for _, r := range [][2]string{{"p_s3", "s3"}, {"p_dual", "dual_shadow"}, {"p_git", "git_only"}} {
			exec("INSERT INTO projects (id, workspace_id, name, cloud_sync_mode) VALUES ("+dc.ph(1)+", 'ws1', 'x', "+dc.ph(2)+")", r[0], r[1])
		}
		exec("INSERT INTO project_checkpoints (id, project_id, commit_sha) VALUES ('cp1', 'p_dual', 'abc')")
		var before string
		if err := db.QueryRowContext(ctx, "SELECT cloud_sync_mode FROM projects WHERE id = 'p_default'").Scan(&before); err != nil || before != "s3" {
			t.Fatalf("before the flip the default is s3, got %q (%v)", before, err)
		}

		if err := migrations.Up(ctx, dc.d, db); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"p_default": "git_only", "p_s3": "git_only", "p_dual": "dual_shadow", "p_git": "git_only"}
		for id, mode := range want {
			var got string
			if err := db.QueryRowContext(ctx, "SELECT cloud_sync_mode FROM projects WHERE id = "+dc.ph(1), id).Scan(&got); err != nil || got != mode {
				t.Errorf("%s: mode %q (%v), want %q", id, got, err, mode)
			}
		}
		exec("INSERT INTO projects (id, workspace_id, name) VALUES ('p_new', 'ws1', 'n')")
		var got string
		if err := db.QueryRowContext(ctx, "SELECT cloud_sync_mode FROM projects WHERE id = 'p_new'").Scan(&got); err != nil || got != "git_only" {
			t.Fatalf("new rows default to git_only, got %q (%v)", got, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM project_checkpoints WHERE project_id = 'p_dual'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("checkpoint rows survive the flip: %d (%v)", n, err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO projects (id, workspace_id, name, cloud_sync_mode) VALUES ('p_bad', 'ws1', 'b', 'bogus')"); err == nil {
			t.Fatal("the mode column must refuse unknown values")
		}
	})
}

// Applying migrations twice is a no-op; replicas starting together on
// Postgres apply each migration once (advisory lock).
func TestMigrateTwiceAndInParallel(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, dc dialectCase, db *sql.DB) {
		ctx := context.Background()
		if dc.d == migrations.Postgres {
			url := testenv.PostgresDB(t, testenv.Template{Name: "empty", Hash: "0",
				Migrate: func(context.Context, *sql.DB) error { return nil }})
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for range 4 {
				wg.Go(func() {
					pdb, err := sql.Open("pgx", url)
					if err != nil {
						errs <- err
						return
					}
					defer pdb.Close()
					errs <- migrations.Up(ctx, dc.d, pdb)
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("parallel migrate: %v", err)
				}
			}
			db, _ = sql.Open("pgx", url)
			defer db.Close()
		}
		for i := 0; i < 2; i++ {
			if err := migrations.Up(ctx, dc.d, db); err != nil {
				t.Fatalf("run %d: %v", i+1, err)
			}
		}
		p, err := migrations.Provider(dc.d, db)
		if err != nil {
			t.Fatal(err)
		}
		srcs := p.ListSources()
		latest := srcs[len(srcs)-1].Version
		v, err := p.GetDBVersion(ctx)
		if err != nil || v != latest || latest < 2 {
			t.Fatalf("version = %d (%v), want the latest, %d", v, err, latest)
		}
	})
}

func TestHashIsStable(t *testing.T) {
	t.Parallel()
	a, err := migrations.Hash(migrations.Postgres)
	b, _ := migrations.Hash(migrations.Postgres)
	c, _ := migrations.Hash(migrations.SQLite)
	if err != nil || a != b || a == c || len(a) != 64 {
		t.Fatalf("hashes %q %q %q (%v)", a, b, c, err)
	}
}

// Down from the top to 00001 works on both dialects, and the down step of
// 00002 brings the default back to s3 on SQLite as on Postgres (rows keep
// their mode: the backfill cannot be told apart from hand-set rows).
func TestDownMirrorsAcrossDialects(t *testing.T) {
	eachDialect(t, func(t *testing.T, dc dialectCase, db *sql.DB) {
		ctx := context.Background()
		if err := migrations.Up(ctx, dc.d, db); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO workspaces (id, name) VALUES ('ws1', 'w')"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO projects (id, workspace_id, name, cloud_sync_mode) VALUES ('p1', 'ws1', 'a', 'dual_shadow')"); err != nil {
			t.Fatal(err)
		}
		p, err := migrations.Provider(dc.d, db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.DownTo(ctx, 1); err != nil {
			t.Fatalf("down to 1: %v", err)
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO projects (id, workspace_id, name) VALUES ('p2', 'ws1', 'b')"); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]string{"p1": "dual_shadow", "p2": "s3"} {
			var got string
			if err := db.QueryRowContext(ctx, "SELECT cloud_sync_mode FROM projects WHERE id = "+dc.ph(1), id).Scan(&got); err != nil || got != want {
				t.Errorf("%s after down: %q (%v), want %q", id, got, err, want)
			}
		}
		if err := migrations.Up(ctx, dc.d, db); err != nil {
			t.Fatalf("up again: %v", err)
		}
	})
}
