package pairedmachine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/shared/logging"
)

const goodToken = "svc_pt_good"

// fakeAPI is the API's side of the tunnel: it accepts websockets and hands
// each one out as a net.Conn to an HTTP/2 client, as the apiserver does.
type fakeAPI struct {
	srv   *httptest.Server
	conns chan net.Conn
	mu    sync.Mutex
	open  []net.Conn
}

func newFakeAPI(t *testing.T) *fakeAPI {
	a := &fakeAPI{conns: make(chan net.Conn, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/pairing/session", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+goodToken {
			http.Error(w, `{"error":{}}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(Session{ProjectID: "prj_1", CloudSyncMode: "git_only", RuntimeToken: "svc_rt_prj_1.x"})
	})
	mux.HandleFunc("GET /api/pairing/tunnel", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+goodToken {
			http.Error(w, `{"error":{}}`, http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		nc := &closeConn{Conn: websocket.NetConn(ctx, ws, websocket.MessageBinary), done: make(chan struct{}), cancel: cancel}
		a.mu.Lock()
		a.open = append(a.open, nc)
		a.mu.Unlock()
		a.conns <- nc
		<-nc.done
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		a.mu.Lock()
		for _, c := range a.open {
			_ = c.Close()
		}
		a.mu.Unlock()
		a.srv.Close()
	})
	return a
}

type closeConn struct {
	net.Conn
	once   sync.Once
	done   chan struct{}
	cancel context.CancelFunc
}

func (c *closeConn) Close() error {
	c.once.Do(func() { close(c.done) })
	err := c.Conn.Close()
	c.cancel()
	return err
}

// client is an HTTP/2 client whose next connection is the next tunnel.
func (a *fakeAPI) client() (*http.Client, *net.Conn) {
	var last net.Conn
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		select {
		case c := <-a.conns:
			last = c
			return c, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, &last
}

func get(t *testing.T, c *http.Client, path string) string {
	t.Helper()
	res, err := c.Get("http://paired.invalid" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.ProtoMajor != 2 {
		t.Errorf("proto %s", res.Proto)
	}
	return string(b)
}

func TestTunnelServesAndRedials(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	l := &Listener{Client: &Client{APIURL: api.srv.URL, Token: goodToken, Log: zaptest.NewLogger(t)},
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	srv := &http.Server{Protocols: l.Protocols(), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served "+r.URL.Path)
	})}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	c, last := api.client()
	if got := get(t, c, "/agent/a"); got != "served /agent/a" {
		t.Fatalf("first tunnel: %q", got)
	}
	// The API drops the tunnel: the machine dials a new one.
	_ = (*last).Close()
	c.CloseIdleConnections()
	if got := get(t, c, "/agent/b"); got != "served /agent/b" {
		t.Fatalf("second tunnel: %q", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
}

func TestRevokedTokenEndsServe(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	c := &Client{APIURL: api.srv.URL, Token: "svc_pt_revoked", Log: zaptest.NewLogger(t)}
	if _, err := c.Session(context.Background()); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("session: %v", err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	if err := srv.Serve(&Listener{Client: c}); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("serve: %v", err)
	}
}

func TestSession(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	s, err := (&Client{APIURL: api.srv.URL + "/", Token: goodToken}).Session(context.Background())
	if err != nil || s != (Session{ProjectID: "prj_1", CloudSyncMode: "git_only", RuntimeToken: "svc_rt_prj_1.x"}) {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestSplitArgs(t *testing.T) {
	t.Parallel()
	own, rest := splitArgs([]string{"--api", "http://a", "--data-dir", "/d", "-token=t", "--workspace-dir=/w"}, "api", "token")
	if !slices.Equal(own, []string{"--api", "http://a", "-token=t"}) || !slices.Equal(rest, []string{"--data-dir", "/d", "--workspace-dir=/w"}) {
		t.Fatalf("own %q rest %q", own, rest)
	}
}

// Paired mode's own options come from its flags or the environment (the
// token also from SVC_PAIRING_TOKEN_FILE), the logger's included; every
// other flag is left for the pod.
func TestParseArgs(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("t-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    pairedConfig
		rest    []string
		wantErr string
	}{
		{name: "flags", args: []string{"--api", "http://a", "--data-dir", "/d", "-token=t", "--log-level=debug", "--log-format", "console"},
			want: pairedConfig{API: "http://a", Token: "t", Log: logging.Options{Level: "debug", Format: "console"}}, rest: []string{"--data-dir", "/d"}},
		{name: "environment", env: map[string]string{"SVC_API_URL": "http://e", "SVC_PAIRING_TOKEN": "t-env", "SVC_LOG_LEVEL": "warn", "SVC_LOG_FORMAT": "console"},
			want: pairedConfig{API: "http://e", Token: "t-env", Log: logging.Options{Level: "warn", Format: "console"}}},
		{name: "token file and defaults", args: []string{"--api=http://a"}, env: map[string]string{"SVC_PAIRING_TOKEN_FILE": tokenFile},
			want: pairedConfig{API: "http://a", Token: "t-file", Log: logging.Options{Level: "info", Format: "json"}}},
		{name: "no token", args: []string{"--api=http://a"}, wantErr: "--api and --token are required"},
		{name: "bad log format", args: []string{"--api=http://a", "--token=t"}, env: map[string]string{"SVC_LOG_FORMAT": "xml"}, wantErr: "SVC_LOG_FORMAT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, rest, err := parseArgs(tc.args, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || c != tc.want || !slices.Equal(rest, tc.rest) {
				t.Fatalf("config %+v rest %q err %v; want %+v rest %q", c, rest, err, tc.want, tc.rest)
			}
		})
	}
}
