package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// PostgresServer is a throw-away PostgreSQL server: a fresh cluster in a
// temp dir, fsync off, listening on 127.0.0.1 and a private socket dir.
type PostgresServer struct {
	dir  string
	url  string
	proc *process
}

// StartPostgres initdb's a cluster in a temp dir and starts postgres on a
// free port, returning once it accepts connections. When running as root
// it runs both as the "postgres" OS user (they refuse to run as root).
func StartPostgres(ctx context.Context) (*PostgresServer, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	return inTempDir("pg", func(dir string) (*PostgresServer, error) {
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("testenv: chown %s to postgres: %w", dir, err)
			}
		}
		s := &PostgresServer{dir: dir}
		return s, s.start(ctx, bin, cred)
	})
}

func (s *PostgresServer) start(ctx context.Context, bin string, cred *syscall.Credential) error {
	data := filepath.Join(s.dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: initdb: %w\n%s", err, out)
	}
	return onFreePort(func(port int) error {
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", s.dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "autovacuum=off", "-c", "max_connections=300")
		proc, err := startProcess(cmd, filepath.Join(s.dir, "postgres.log"), cred)
		if err != nil {
			return fmt.Errorf("testenv: postgres: %w", err)
		}
		s.proc = proc
		s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		err = pollUntil(ctx, 60*time.Second, proc.exited, func(ctx context.Context) error { return ping(ctx, s.url) })
		if err == nil {
			return nil
		}
		proc.stop(syscall.SIGQUIT, 5*time.Second)
		return fmt.Errorf("testenv: postgres did not start: %w\n%s", err, proc.logTail())
	})
}

// URL is the admin URL (user postgres, database postgres).
func (s *PostgresServer) URL() string { return s.url }

// Stop shuts the server down (fast mode) and removes its directory.
func (s *PostgresServer) Stop() {
	s.proc.stop(syscall.SIGINT, 15*time.Second)
	os.RemoveAll(s.dir)
}

func ping(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// pgBinDir finds initdb and postgres: $SVC_PG_BIN_DIR, the newest
// /usr/lib/postgresql/<v>/bin, or $PATH.
func pgBinDir() (string, error) {
	if d := os.Getenv(EnvPGBinDir); d != "" {
		return d, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(found, func(i, j int) bool { return pgVersion(found[i]) > pgVersion(found[j]) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("testenv: PostgreSQL server binaries not found: install them (apt-get install postgresql), set %s, or point %s at a server", EnvPGBinDir, EnvDatabaseURL)
}

func pgVersion(p string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
	return v
}

// postgresCredential is the "postgres" OS user when we run as root (initdb
// and postgres refuse root), else nil (run as ourselves).
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testenv: running as root needs a \"postgres\" OS user for initdb/postgres: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// withDatabase returns the admin URL pointing at database name.
func withDatabase(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("testenv: %s must be a postgres:// URL", EnvDatabaseURL)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// quoteIdent quotes a Postgres identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
