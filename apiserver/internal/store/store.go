// Package store is the API server's database layer (gorm) over PostgreSQL in
// production and SQLite for the embedded default (docs/design.md §4). It holds the
// rows of spec section 2: workspaces and their API keys (5.1), usage windows
// (8), projects with their sync fields (2.6), checkpoints and channels (2.5).
// Each row type sits in one file with every query on it (workspaces.go,
// users.go, keys.go, sessions.go, projects.go, checkpoints.go, channels.go,
// usage.go, outbox.go, runtime.go, pairing.go); first and all are the
// generic one-row and list reads. Both dialects pass one test suite.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/svc-dev/svc/migrations"
	"github.com/svc-dev/svc/shared/datadir"
)

var (
	// ErrNotFound is returned when a row does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict is returned when a unique row already exists.
	ErrConflict = errors.New("store: already exists")
)

// Store wraps the database handle.
type Store struct {
	db      *gorm.DB
	sqlDB   *sql.DB
	dialect migrations.Dialect
	// usageDays: day partitions of usage_records known to exist
	// (usage_partitions.go).
	usageDays sync.Map
}

// Open connects to url: a postgres:// URL, or a SQLite file path (empty means
// <dataDir>/svc.db). It does not migrate; call Migrate.
func Open(url, dataDir string) (*Store, error) {
	cfg := &gorm.Config{Logger: logger.Discard, SkipDefaultTransaction: true,
		NowFunc: func() time.Time { return time.Now().UTC() }}
	var (
		dial    gorm.Dialector
		dialect migrations.Dialect
	)
	switch {
	case strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"):
		dial, dialect = postgres.Open(url), migrations.Postgres
	default:
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			if dataDir == "" {
				return nil, errors.New("store: neither a database URL nor a data dir is set")
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return nil, err
			}
			path = datadir.Database(dataDir)
		}
		dsn := path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"
		dial, dialect = sqlite.Open(dsn), migrations.SQLite
		cfg.PrepareStmt = true // pgx caches statements itself; SQLite gets gorm's cache
	}
	db, err := gorm.Open(dial, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if dialect == migrations.SQLite {
		// One writer at a time is what SQLite allows; a single connection
		// turns lock contention into queueing instead of SQLITE_BUSY.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(DefaultMaxConns)
		sqlDB.SetMaxIdleConns(DefaultMaxConns)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	}
	return &Store{db: db, sqlDB: sqlDB, dialect: dialect}, nil
}

// DefaultMaxConns is a PostgreSQL store's connection bound
// (SVC_DATABASE_MAX_CONNS).
const DefaultMaxConns = 32

// SetMaxConns bounds the open (and idle) PostgreSQL connections; SQLite
// keeps its one.
func (s *Store) SetMaxConns(n int) {
	if s.dialect == migrations.SQLite || n <= 0 {
		return
	}
	s.sqlDB.SetMaxOpenConns(n)
	s.sqlDB.SetMaxIdleConns(n)
}

// Migrate applies pending migrations (under an advisory lock on Postgres).
func (s *Store) Migrate(ctx context.Context) error {
	return migrations.Up(ctx, s.dialect, s.sqlDB)
}

// Dialect reports which database the store talks to.
func (s *Store) Dialect() migrations.Dialect { return s.dialect }

// Ping checks the connection (used by /readyz).
func (s *Store) Ping(ctx context.Context) error { return s.sqlDB.PingContext(ctx) }

// Close releases the connection pool.
func (s *Store) Close() error { return s.sqlDB.Close() }

// DB exposes the raw handle for tests.
func (s *Store) DB() *sql.DB { return s.sqlDB }

// NewID returns prefix_ followed by 20 lowercase base32 characters (100 bits),
// safe in object keys and URLs.
func NewID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return prefix + "_" + string(b[:])
}

// first loads the first row of T that matches cond and its args (in db's
// order, if any); ErrNotFound when none does.
func first[T any](ctx context.Context, db *gorm.DB, cond string, args ...any) (T, error) {
	var row T
	err := db.WithContext(ctx).First(&row, append([]any{cond}, args...)...).Error
	return row, notFound(err)
}

// all loads every row of T that matches cond and its args, in db's order
// (and within its limit, if any).
func all[T any](ctx context.Context, db *gorm.DB, cond string, args ...any) ([]T, error) {
	var rows []T
	err := db.WithContext(ctx).Where(cond, args...).Find(&rows).Error
	return rows, err
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	return err
}

// isUnique reports whether err is a unique-constraint violation on either dialect.
func isUnique(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLSTATE 23505") || strings.Contains(msg, "UNIQUE constraint failed")
}

// tx runs fn in a transaction.
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn)
}
