// Package migrations embeds the versioned SQL schema of the API server and
// applies it with pressly/goose. There is one history per dialect (postgres/,
// sqlite/) with the same version numbers; 00002 is the sync-mode default flip
// of spec section 9.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Dialect names a schema history.
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// FS returns the migration files of a dialect.
func FS(d Dialect) (fs.FS, error) {
	switch d {
	case Postgres, SQLite:
		return fs.Sub(files, string(d))
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q", d)
}

// Provider returns a goose provider for db. On Postgres the provider holds a
// session advisory lock while it runs, so replicas that start together apply
// each migration once. On SQLite the caller must pass a *sql.DB limited to one
// connection (00002 switches foreign keys off for its connection).
func Provider(d Dialect, db *sql.DB) (*goose.Provider, error) {
	fsys, err := FS(d)
	if err != nil {
		return nil, err
	}
	var opts []goose.ProviderOption
	gd := goose.DialectSQLite3
	if d == Postgres {
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(gd, db, fsys, opts...)
}

// Up applies every pending migration.
func Up(ctx context.Context, d Dialect, db *sql.DB) error {
	p, err := Provider(d, db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// UpTo applies migrations up to and including version (used by tests that
// insert fixture rows between steps).
func UpTo(ctx context.Context, d Dialect, db *sql.DB, version int64) error {
	p, err := Provider(d, db)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// Hash identifies the migration files of a dialect (hex SHA-256 over names and
// contents); test templates are keyed by it, so a changed schema is never
// served from a stale template.
func Hash(d Dialect) (string, error) {
	fsys, err := FS(d)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = fs.WalkDir(fsys, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
