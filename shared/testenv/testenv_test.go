package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/svc-dev/svc/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var migrations atomic.Int32

var tmpl = testenv.Template{
	Name: "testenv_test",
	Hash: "v1",
	Migrate: func(ctx context.Context, db *sql.DB) error {
		migrations.Add(1)
		_, err := db.ExecContext(ctx, `CREATE TABLE items (name text PRIMARY KEY);
			INSERT INTO items VALUES ('seed')`)
		return err
	},
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func names(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT name FROM items ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

func TestPostgresTemplateClonesAreIsolated(t *testing.T) {
	t.Parallel()
	dsnA := testenv.PostgresDB(t, tmpl)
	dsnB := testenv.PostgresDB(t, tmpl)
	if dsnA == dsnB || !strings.HasPrefix(dsnA, "postgres://") {
		t.Fatalf("DSNs %q and %q: want two distinct postgres:// URLs", dsnA, dsnB)
	}
	a, b := open(t, dsnA), open(t, dsnB)
	if _, err := a.ExecContext(t.Context(), "INSERT INTO items VALUES ('only-in-a')"); err != nil {
		t.Fatal(err)
	}
	if got := names(t, a); got != "only-in-a,seed" {
		t.Errorf("database A has %q", got)
	}
	if got := names(t, b); got != "seed" {
		t.Errorf("database B has %q, want only the migrated seed row", got)
	}
	// 0 when a shared server (SVC_TEST_DATABASE_URL) already holds the
	// template from an earlier run.
	if n := migrations.Load(); n > 1 {
		t.Errorf("Migrate ran %d times for one template, want at most 1", n)
	}
}

func TestPostgresDBIsDroppedAfterTest(t *testing.T) {
	t.Parallel()
	var dsn string
	t.Run("inner", func(t *testing.T) { dsn = testenv.PostgresDB(t, tmpl) })
	db := open(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("ping of a dropped test database: %v, want 'does not exist'", err)
	}
}

func TestPostgresThroughFaultProxy(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t, tmpl)
	u := strings.SplitN(strings.TrimPrefix(dsn, "postgres://"), "/", 2)[0]
	host := u[strings.Index(u, "@")+1:]
	proxy := testenv.NewFaultProxy(t, host)
	proxied, err := proxy.RewriteURL(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := open(t, proxied)
	ping := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
	if err := ping(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	proxy.SetDown(true)
	if err := ping(); err == nil {
		t.Fatalf("query succeeded while the proxy is down")
	}
	proxy.SetDown(false)
	if err := ping(); err != nil {
		t.Fatalf("after the proxy came back: %v", err)
	}
}

func TestFaultProxy(t *testing.T) {
	t.Parallel()
	// An echo server as the target.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	proxy := testenv.NewFaultProxy(t, ln.Addr().String())
	echo := func(c net.Conn, msg string) error {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if line != msg+"\n" {
			return fmt.Errorf("echo %q, got %q", msg, line)
		}
		return nil
	}
	// dialEcho opens a new connection through the proxy and echoes msg; a
	// refused or reset dial is an error like any other.
	dialEcho := func(msg string) error {
		c, err := net.Dial("tcp", proxy.Addr())
		if err != nil {
			return err
		}
		defer c.Close()
		return echo(c, msg)
	}
	existing, err := net.Dial("tcp", proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer existing.Close()
	if err := echo(existing, "up"); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	proxy.SetDown(true)
	if err := echo(existing, "existing while down"); err == nil {
		t.Fatal("an existing connection survived SetDown(true)")
	}
	if err := dialEcho("new while down"); err == nil {
		t.Fatal("a new connection worked while down")
	}
	proxy.SetDown(false)
	if err := dialEcho("back up"); err != nil {
		t.Fatalf("after SetDown(false): %v", err)
	}
}

func minioClient(t *testing.T, env testenv.S3Env) *minio.Client {
	t.Helper()
	c, err := minio.New(env.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(env.AccessKey, env.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMinIOFreshBuckets(t *testing.T) {
	t.Parallel()
	a, b := testenv.MinIO(t), testenv.MinIO(t)
	if a.Bucket == b.Bucket {
		t.Fatalf("two calls gave the same bucket %q", a.Bucket)
	}
	c := minioClient(t, a)
	if _, err := c.PutObject(t.Context(), a.Bucket, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for obj := range c.ListObjects(t.Context(), b.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Fatalf("bucket B is not empty: %+v", obj)
	}
}

func TestMinIOServerStopStart(t *testing.T) {
	t.Parallel()
	srv := testenv.NewMinIOServer(t)
	env := srv.NewBucket(t)
	c := minioClient(t, env)
	ctx := t.Context()
	if _, err := c.PutObject(ctx, env.Bucket, "durable", strings.NewReader("kept"), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := c.StatObject(short, env.Bucket, "durable", minio.StatObjectOptions{})
	cancel()
	if err == nil {
		t.Fatal("StatObject succeeded while the server is stopped")
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, env.Bucket, "durable", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, obj); err != nil || buf.String() != "kept" {
		t.Fatalf("after restart: %q, %v", buf.String(), err)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("FreePort %d is not bindable: %v", port, err)
	}
	ln.Close()
}
