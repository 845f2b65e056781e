package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/console"
	"github.com/svc-dev/svc/apiserver/internal/console/login"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/server"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/testenv/testhttp"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const password = "correct horse battery"

// clock is the console's adjustable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// world is the API server in process (server.New, the real route table)
// with the console mounted, on one database, and two workspaces: A, where
// owner is an owner and member a member, and B, owned by other.
type world struct {
	url                  string
	st                   *store.Store
	clock                *clock
	wsA, wsB             store.Workspace
	owner, member, other store.User
	projA, projB         store.Project
	srv                  *server.Server
}

func newWorld(t *testing.T, st *store.Store) *world { return newWorldTB(t, st, nil) }

func newWorldTB(t testing.TB, st *store.Store, hyd *hydrate.Manager) *world {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.Load(catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{st: st, clock: &clock{t: time.Now()}}
	srv := server.New(server.Deps{Store: st, Catalog: cat, Log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Hydrate: hyd,
		Console: &console.Options{Now: w.clock.now, IdleTimeout: time.Hour, AbsoluteTimeout: 24 * time.Hour}})
	w.srv = srv
	hs := httptest.NewServer(srv.Echo)
	t.Cleanup(func() {
		hs.Close()
		_ = srv.Close(context.Background())
	})
	w.url = hs.URL
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	w.wsA, err = st.CreateWorkspace(ctx, "alpha", "free")
	must(err)
	w.wsB, err = st.CreateWorkspace(ctx, "beta", "free")
	must(err)
	for _, u := range []*store.User{&w.owner, &w.member, &w.other} {
		*u, err = st.CreateUser(ctx, store.NewID("u")+"@example.test")
		must(err)
		must(login.SetPassword(ctx, st, u.ID, password))
	}
	_, err = st.SetMember(ctx, w.wsA.ID, w.owner.ID, store.RoleOwner)
	must(err)
	_, err = st.AddMember(ctx, w.wsA.ID, w.member.ID)
	must(err)
	_, err = st.SetMember(ctx, w.wsB.ID, w.other.ID, store.RoleOwner)
	must(err)
	w.projA, err = st.CreateProject(ctx, w.wsA.ID, "site")
	must(err)
	w.projB, err = st.CreateProject(ctx, w.wsB.ID, "secret-site")
	must(err)
	return w
}

// browser is an HTTP client with cookies that does not follow redirects.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func (w *world) browser(t testing.TB) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: w.url, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values, header http.Header) response {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: string(out)}
}

func (b *browser) get(path string) response { return b.do(http.MethodGet, path, nil, nil) }

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	r := b.get(path)
	m := csrfRE.FindStringSubmatch(r.body)
	if m == nil {
		b.t.Fatalf("no CSRF field on %s (%d): %.300s", path, r.status, r.body)
	}
	return m[1]
}

// signIn signs u in with the password form.
func (b *browser) signIn(u store.User) {
	b.t.Helper()
	tok := b.csrf("/console/sign-in")
	r := b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {tok}, "email": {u.Email}, "password": {password},
		"next": {"/console"}}, nil)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/console" {
		b.t.Fatalf("sign in: %d %s %.300s", r.status, r.header.Get("Location"), r.body)
	}
}

func TestSignInWithPassword(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		b := w.browser(t)
		if r := b.get("/console/w/" + w.wsA.ID + "/keys"); r.status != http.StatusSeeOther ||
			!strings.HasPrefix(r.header.Get("Location"), "/console/sign-in?next=") {
			t.Fatalf("signed out: %d %s", r.status, r.header.Get("Location"))
		}
		tok := b.csrf("/console/sign-in")
		cases := []struct {
			name, email, password, csrf string
			want                        int
		}{
			{"wrong password", w.owner.Email, "wrong password!", tok, http.StatusUnauthorized},
			{"unknown user", "nobody@example.test", password, tok, http.StatusUnauthorized},
			{"no csrf", w.owner.Email, password, "", http.StatusForbidden},
			{"right", w.owner.Email, password, tok, http.StatusSeeOther},
		}
		for _, c := range cases {
			r := b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {c.csrf}, "email": {c.email},
				"password": {c.password}, "next": {"https://evil.example/"}}, nil)
			if r.status != c.want {
				t.Fatalf("%s: %d, want %d", c.name, r.status, c.want)
			}
			if c.want == http.StatusSeeOther {
				if loc := r.header.Get("Location"); loc != "/console" {
					t.Fatalf("an outside next= was followed: %q", loc)
				}
				ck := r.header.Get("Set-Cookie")
				for _, attr := range []string{console.SessionCookie + "=", "HttpOnly", "SameSite=Lax", "Path=/"} {
					if !strings.Contains(ck, attr) {
						t.Fatalf("session cookie %q lacks %s", ck, attr)
					}
				}
				if strings.Contains(ck, "Secure") {
					t.Fatalf("cookie over plain HTTP marked Secure: %q", ck)
				}
			} else if strings.Contains(r.header.Get("Set-Cookie"), console.SessionCookie) {
				t.Fatalf("%s: a session was started", c.name)
			}
		}
		r := b.get("/console/w/" + w.wsA.ID + "/keys")
		if r.status != http.StatusOK || !strings.Contains(r.body, w.owner.Email) {
			t.Fatalf("keys page after sign-in: %d", r.status)
		}
		// Signing out ends the server-side session.
		r = b.do(http.MethodPost, "/console/sign-out", url.Values{"csrf": {b.csrf("/console/w/" + w.wsA.ID + "/keys")}}, nil)
		if r.status != http.StatusSeeOther {
			t.Fatalf("sign out: %d", r.status)
		}
		if r := b.get("/console/w/" + w.wsA.ID + "/keys"); r.status != http.StatusSeeOther {
			t.Fatalf("after sign-out: %d", r.status)
		}
	})
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		page := "/console/w/" + w.wsA.ID + "/usage"
		cases := []struct {
			name  string
			steps []time.Duration // clock moves, each followed by a request
			last  int
		}{
			{"active within idle", []time.Duration{50 * time.Minute, 50 * time.Minute}, http.StatusOK},
			{"idle expiry", []time.Duration{61 * time.Minute}, http.StatusSeeOther},
			// 29 × 50 min: never idle for an hour, but past the 24 h absolute expiry.
			{"absolute expiry", repeat(50*time.Minute, 29), http.StatusSeeOther},
		}
		for _, c := range cases {
			b := w.browser(t)
			b.signIn(w.owner)
			var r response
			for _, d := range c.steps {
				w.clock.add(d)
				r = b.get(page)
			}
			if r.status != c.last {
				t.Fatalf("%s: %d, want %d", c.name, r.status, c.last)
			}
		}
	})
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestLoginLinkIsOneTime(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		link, _, err := login.CreateLoginLink(ctx, w.st, w.member.ID, w.url, w.clock.now())
		if err != nil {
			t.Fatal(err)
		}
		path := strings.TrimPrefix(link, w.url)
		token := path[strings.LastIndex(path, "/")+1:]
		b := w.browser(t)
		tok := b.csrf(path) // GET shows a button and uses nothing up
		r := b.do(http.MethodPost, "/console/link", url.Values{"csrf": {tok}, "token": {token}}, nil)
		if r.status != http.StatusSeeOther {
			t.Fatalf("first use: %d %.300s", r.status, r.body)
		}
		if r := b.get("/console/w/" + w.wsA.ID + "/projects"); r.status != http.StatusOK {
			t.Fatalf("signed in by link: %d", r.status)
		}
		b2 := w.browser(t)
		tok2 := b2.csrf(path)
		if r := b2.do(http.MethodPost, "/console/link", url.Values{"csrf": {tok2}, "token": {token}}, nil); r.status != http.StatusGone {
			t.Fatalf("second use: %d", r.status)
		}
		// An expired link is refused too.
		link2, _, err := login.CreateLoginLink(ctx, w.st, w.member.ID, w.url, w.clock.now())
		if err != nil {
			t.Fatal(err)
		}
		w.clock.add(login.LinkTTL + time.Second)
		token2 := link2[strings.LastIndex(link2, "/")+1:]
		if r := b2.do(http.MethodPost, "/console/link", url.Values{"csrf": {tok2}, "token": {token2}}, nil); r.status != http.StatusGone {
			t.Fatalf("expired link: %d", r.status)
		}
	})
}

func TestSignInIsRateLimited(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		b := w.browser(t)
		tok := b.csrf("/console/sign-in")
		var last response
		for i := 0; i <= console.SignInPerMinuteEmail; i++ {
			last = b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {tok}, "email": {w.owner.Email},
				"password": {"guess number " + string(rune('a'+i))}}, nil)
		}
		if last.status != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" {
			t.Fatalf("attempt %d: %d (Retry-After %q)", console.SignInPerMinuteEmail+1, last.status, last.header.Get("Retry-After"))
		}
		// Even the right password waits for the next minute.
		r := b.do(http.MethodPost, "/console/sign-in", url.Values{"csrf": {tok}, "email": {w.owner.Email}, "password": {password}}, nil)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("right password while limited: %d", r.status)
		}
	})
}

func TestCSRFIsRequired(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		b := w.browser(t)
		b.signIn(w.owner)
		keys := "/console/w/" + w.wsA.ID + "/keys"
		tok := b.csrf(keys)
		cases := []struct {
			name   string
			form   url.Values
			header http.Header
			want   int
		}{
			{"no token", url.Values{"name": {"x"}}, nil, http.StatusForbidden},
			{"wrong token", url.Values{"name": {"x"}, "csrf": {"not-the-token"}}, nil, http.StatusForbidden},
			{"foreign origin", url.Values{"name": {"x"}, "csrf": {tok}}, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
			{"token", url.Values{"name": {"ok"}, "csrf": {tok}}, nil, http.StatusOK},
		}
		for _, c := range cases {
			if r := b.do(http.MethodPost, keys, c.form, c.header); r.status != c.want {
				t.Fatalf("%s: %d, want %d", c.name, r.status, c.want)
			}
		}
		ks, err := w.st.ListAPIKeys(context.Background(), w.wsA.ID)
		if err != nil || len(ks) != 1 || ks[0].Name != "ok" {
			t.Fatalf("keys after the refused posts: %+v %v", ks, err)
		}
	})
}

func TestWorkspaceIsolationAndRoles(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		owner, member := w.browser(t), w.browser(t)
		owner.signIn(w.owner)
		member.signIn(w.member)
		a, bWS := "/console/w/"+w.wsA.ID, "/console/w/"+w.wsB.ID
		cases := []struct {
			name string
			b    *browser
			path string
			want int
		}{
			{"own workspace", owner, a + "/projects", http.StatusOK},
			{"other workspace keys", owner, bWS + "/keys", http.StatusNotFound},
			{"other workspace usage", owner, bWS + "/usage", http.StatusNotFound},
			{"other workspace project", owner, bWS + "/projects/" + w.projB.ID, http.StatusNotFound},
			{"other project under own workspace", owner, a + "/projects/" + w.projB.ID, http.StatusNotFound},
			{"other project channel", owner, a + "/projects/" + w.projB.ID + "/channel", http.StatusNotFound},
			{"no such workspace", owner, "/console/w/ws_nope/keys", http.StatusNotFound},
			{"member reads keys", member, a + "/keys", http.StatusOK},
			{"member reads channel", member, a + "/projects/" + w.projA.ID + "/channel", http.StatusOK},
		}
		for _, c := range cases {
			r := c.b.get(c.path)
			if r.status != c.want {
				t.Fatalf("%s: %d, want %d", c.name, r.status, c.want)
			}
			if c.want == http.StatusNotFound && strings.Contains(r.body, "secret-site") {
				t.Fatalf("%s: the 404 page names the other workspace's project", c.name)
			}
		}
		if strings.Contains(owner.get(a+"/projects").body, "secret-site") {
			t.Fatal("the projects page lists another workspace's project")
		}
		// A member may not change keys or channels.
		tok := member.csrf(a + "/keys")
		for _, p := range []string{a + "/keys", a + "/projects/" + w.projA.ID + "/channel/secret"} {
			if r := member.do(http.MethodPost, p, url.Values{"csrf": {tok}, "action": {"rotate"}}, nil); r.status != http.StatusForbidden {
				t.Fatalf("member POST %s: %d", p, r.status)
			}
		}
	})
}

// The JSON key API: an owner's key or a session manages keys; a member's
// key, another workspace's key and a session without the CSRF header do not.
func TestKeysJSONAPI(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		ownerKey, err := apikey.Issue(ctx, w.st, w.wsA.ID, w.owner.ID, "owner")
		if err != nil {
			t.Fatal(err)
		}
		memberKey, _ := apikey.Issue(ctx, w.st, w.wsA.ID, w.member.ID, "member")
		otherKey, _ := apikey.Issue(ctx, w.st, w.wsB.ID, w.other.ID, "other")
		api := "/api/workspaces/" + w.wsA.ID + "/keys"
		call := func(method, path, key, body string, h http.Header) response {
			t.Helper()
			b := w.browser(t)
			req, _ := http.NewRequest(method, w.url+path, strings.NewReader(body))
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, v := range h {
				req.Header[k] = v
			}
			res, out := testhttp.Do(t, b.c, req, key)
			return response{status: res.StatusCode, header: res.Header, body: string(out)}
		}
		cases := []struct {
			name, method, key string
			want              int
		}{
			{"no credentials", http.MethodGet, "", http.StatusUnauthorized},
			{"member key lists", http.MethodGet, memberKey.Key, http.StatusForbidden},
			{"member key creates", http.MethodPost, memberKey.Key, http.StatusForbidden},
			{"other workspace key", http.MethodGet, otherKey.Key, http.StatusNotFound},
			{"revoked-looking garbage", http.MethodGet, "svc_sk_nope", http.StatusUnauthorized},
			{"owner key lists", http.MethodGet, ownerKey.Key, http.StatusOK},
		}
		for _, c := range cases {
			if r := call(c.method, api, c.key, `{"name":"x"}`, nil); r.status != c.want {
				t.Fatalf("%s: %d, want %d: %s", c.name, r.status, c.want, r.body)
			}
		}
		r := call(http.MethodPost, api, ownerKey.Key, `{"name":"ci"}`, nil)
		var created struct{ ID, Key, Prefix, Name string }
		if err := json.Unmarshal([]byte(r.body), &created); err != nil || r.status != http.StatusCreated ||
			!strings.HasPrefix(created.Key, "svc_sk_") || created.Name != "ci" {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		list := call(http.MethodGet, api, ownerKey.Key, "", nil)
		if !strings.Contains(list.body, created.ID) || strings.Contains(list.body, created.Key) ||
			strings.Contains(list.body, "keyHash") || strings.Contains(list.body, otherKey.ID) {
			t.Fatalf("list: %s", list.body)
		}
		// The new key works on the public API until it is revoked.
		if r := call(http.MethodGet, "/api/v1/models", created.Key, "", nil); r.status != http.StatusOK {
			t.Fatalf("new key on the public API: %d %s", r.status, r.body)
		}
		if r := call(http.MethodDelete, "/api/workspaces/"+w.wsB.ID+"/keys/"+otherKey.ID, ownerKey.Key, "", nil); r.status != http.StatusNotFound {
			t.Fatalf("revoking another workspace's key: %d", r.status)
		}
		if r := call(http.MethodDelete, api+"/"+otherKey.ID, ownerKey.Key, "", nil); r.status != http.StatusNotFound {
			t.Fatalf("revoking another workspace's key through own path: %d", r.status)
		}
		if r := call(http.MethodDelete, api+"/"+created.ID, ownerKey.Key, "", nil); r.status != http.StatusOK || !strings.Contains(r.body, "revokedAt") {
			t.Fatalf("revoke: %d %s", r.status, r.body)
		}
		refused := false
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if r := call(http.MethodGet, "/api/v1/models", created.Key, "", nil); r.status == http.StatusUnauthorized {
				refused = true
				break
			}
		}
		if !refused {
			t.Fatal("a revoked key is still accepted")
		}
		// A session works with the CSRF header, not without.
		b := w.browser(t)
		b.signIn(w.owner)
		tok := b.csrf("/console/w/" + w.wsA.ID + "/keys")
		if r := b.do(http.MethodPost, api, nil, http.Header{"Content-Type": {"application/json"}}); r.status != http.StatusForbidden {
			t.Fatalf("session without CSRF header: %d", r.status)
		}
		if r := b.do(http.MethodPost, api, nil, http.Header{console.CSRFHeader: {tok}}); r.status != http.StatusCreated {
			t.Fatalf("session with CSRF header: %d %s", r.status, r.body)
		}
	})
}

func TestChannelEditor(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		b := w.browser(t)
		b.signIn(w.owner)
		ch := "/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID + "/channel"
		tok := b.csrf(ch)
		if r := b.get(ch); !strings.Contains(r.body, `id="no-secret"`) {
			t.Fatal("a channel without a secret does not say that every request is rejected")
		}
		cases := []struct {
			name      string
			path      string
			form      url.Values
			want      int
			wantInDB  string
			wantShown string
		}{
			{"short secret", "/secret", url.Values{"action": {"set"}, "secret": {"short"}}, http.StatusBadRequest, "", "16 to 256"},
			{"set secret", "/secret", url.Values{"action": {"set"}, "secret": {"a-long-enough-secret"}}, http.StatusOK, "a-long-enough-secret", "Secret set"},
			{"hop-by-hop header", "/headers", url.Values{"name": {"Connection"}, "value": {"close"}}, http.StatusBadRequest, "", "hop-by-hop"},
			{"bad header name", "/headers", url.Values{"name": {"X Bad"}, "value": {"v"}}, http.StatusBadRequest, "", "not a valid header name"},
			{"headers", "/headers", url.Values{"name": {"X-Team", "", "X-Env"}, "value": {"platform", "", "prod"}}, http.StatusOK, `{"X-Env":"prod","X-Team":"platform"}`, "saved (2)"},
			{"rotate", "/secret", url.Values{"action": {"rotate"}}, http.StatusOK, "whsec_", "shown once"},
			{"clear", "/secret", url.Values{"action": {"clear"}}, http.StatusOK, "", "every external request"},
		}
		for _, c := range cases {
			c.form.Set("csrf", tok)
			r := b.do(http.MethodPost, ch+c.path, c.form, nil)
			if r.status != c.want || !strings.Contains(r.body, c.wantShown) {
				t.Fatalf("%s: %d, want %d and %q in %.2000s", c.name, r.status, c.want, c.wantShown, r.body)
			}
			got, err := w.st.GetChannel(context.Background(), w.projA.ID)
			if c.wantInDB != "" && (err != nil || !strings.Contains(got.Secret+got.CallbackHeaders, c.wantInDB)) {
				t.Fatalf("%s: stored %+v %v", c.name, got, err)
			}
			if c.name == "clear" && got.Secret != "" {
				t.Fatal("secret not cleared")
			}
		}
		if r := b.get(ch); !strings.Contains(r.body, "/api/projects/"+w.projA.ID+"/agent-proxy/agent/channels/webhook/incoming") ||
			!strings.Contains(r.body, `value="X-Team"`) {
			t.Fatal("the editor lacks the incoming URL or the saved headers")
		}
	})
}

func TestUsagePage(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		now := time.Now().UTC()
		wins := []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}
		for i, m := range []string{"svc-2-0", "svc-2-0", "svc-1-0"} {
			err := w.st.RecordUsage(ctx, store.UsageRecord{RequestID: store.NewID("r"), WorkspaceID: w.wsA.ID, Model: m,
				PromptTokens: 100, CompletionTokens: 20, CreditsMicro: 250_000, CreatedAt: now.Add(-time.Duration(i) * 24 * time.Hour)}, wins, now)
			if err != nil {
				t.Fatal(err)
			}
		}
		b := w.browser(t)
		b.signIn(w.member)
		for _, c := range []struct{ metric, want string }{{"requests", "Requests per day"}, {"tokens", "Tokens per day"}, {"credits", "Credits per day"}} {
			r := b.get("/console/w/" + w.wsA.ID + "/usage?metric=" + c.metric)
			if r.status != http.StatusOK || !strings.Contains(r.body, c.want) {
				t.Fatalf("%s: %d", c.metric, r.status)
			}
			if strings.Count(r.body, `class="bar `) != 3 || !strings.Contains(r.body, "svc-1-0") {
				t.Fatalf("%s: chart has %d bars, want 3", c.metric, strings.Count(r.body, `class="bar `))
			}
		}
		r := b.get("/console/w/" + w.wsA.ID + "/usage")
		if !strings.Contains(r.body, "0.75 / ") || !strings.Contains(r.body, "resets") {
			t.Fatalf("windows: %.3000s", r.body)
		}
		// Another workspace's usage is not shown.
		if r := b.get("/console/w/" + w.wsB.ID + "/usage"); r.status != http.StatusNotFound {
			t.Fatalf("other workspace's usage: %d", r.status)
		}
	})
}
