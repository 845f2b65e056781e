package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium (`apt-get install chromium`, .ci/run),
// or $SVC_CHROMIUM.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SVC_CHROMIUM"), "/usr/bin/chromium", "chromium"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("Chromium is not installed: the console's browser tests need it (apt-get install chromium, or set SVC_CHROMIUM)")
	return ""
}

// screenshotDir is $SVC_CONSOLE_SCREENSHOTS, else apiserver/console-screenshots
// (ignored by git): the pages as the browser test saw them.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SVC_CONSOLE_SCREENSHOTS")
	if dir == "" {
		_, file, _, _ := goruntime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "console-screenshots")
	}
	must(t, os.MkdirAll(dir, 0o755))
	return dir
}

// newBrowser starts headless Chromium with an empty profile.
func newBrowser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

type browserRun struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	base string
}

func (b *browserRun) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *browserRun) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("main")))
	b.t.Fatalf("%s: %v (at %s)\n%.3000s", what, err, loc, html)
}

// value runs one action that reads something from the page.
func value[T any](b *browserRun, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	if err != nil {
		b.fail(what, err)
	}
	return v
}

func (b *browserRun) screenshot(name string) {
	b.t.Helper()
	png := value(b, "screenshot "+name, chromedp.FullScreenshot(100))
	must(b.t, os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644))
}

// The console in a real browser against the real apiserver, podagent and
// git: sign in with a one-time link; create a key and use it;
// revoke it and see it refused; set the channel secret and callback
// headers and see a webhook message succeed with them; see the activity
// entry; find the Published badge on the graph; cross-workspace 404; a
// form post without the CSRF token refused; a screenshot of each page.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	w := newProxyWorld(t, podagentBin(t), "SVC_CALLBACK_ALLOWED_NETS=127.0.0.0/8",
		"SVC_POD_CALLBACK_RETRY_BASE=20ms", "SVC_POD_CALLBACK_RETRY_MAX=100ms")
	w.e.upstream.Script(agentScript("notes/console.txt", "written for the console test\n", "I wrote notes/console.txt", nil))
	w.e.admin("member", "add", "--workspace", w.acc.workspace, "--user", w.acc.user, "--role", "owner")
	link := w.e.admin("user", "login-link", "--user", w.acc.user, "--base-url", w.api.URL)["url"].(string)
	other := w.e.account("free")

	b := &browserRun{t: t, ctx: newBrowser(t, 4*time.Minute), dir: screenshotDir(t), base: w.api.URL}
	wsPath := "/console/w/" + w.acc.workspace
	projPath := wsPath + "/projects/" + w.project

	// Sign in with the one-time link.
	b.run("sign in by link", chromedp.Navigate(link))
	b.screenshot("01-sign-in-link")
	b.run("use the link", chromedp.Click(chromedp.CSS("#use-link")), chromedp.WaitVisible(chromedp.CSS("table.projects")))
	loc := value(b, "location", chromedp.Location())
	if !strings.HasSuffix(loc, wsPath+"/projects") {
		t.Fatalf("after sign-in at %s", loc)
	}

	// Create a key; the plain key is shown once and works over HTTP.
	b.run("create a key", chromedp.Navigate(b.base+wsPath+"/keys"),
		chromedp.SendKeys(chromedp.CSS("#key-name"), "browser"),
		chromedp.Click(chromedp.CSS("#create-key")),
		chromedp.WaitVisible(chromedp.CSS("#new-key")))
	key := value(b, "new key", chromedp.Value(chromedp.CSS("#new-key")))
	assertNoSidewaysScroll(b, "the keys page with a new key")
	b.screenshot("02-keys-created")
	if !strings.HasPrefix(key, "svc_sk_") {
		t.Fatalf("new key %q", key)
	}
	if res, body := do(t, http.MethodGet, w.api.URL+"/api/v1/models", key, nil, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("the new key on the public API: %d %s", res.StatusCode, body)
	}
	// Revoke it (the confirm dialog is answered yes) and see it refused.
	keyRow := value(b, "find the key row", chromedp.AttributeValue(fmt.Sprintf(`//tr[td/code[text()="%s…"]]`, key[:len("svc_sk_")+12]), "id")).Value
	b.run("revoke", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(chromedp.CSS("#"+keyRow+" button.danger")),
		chromedp.WaitVisible(chromedp.CSS("#"+keyRow+" .badge.revoked")))
	b.screenshot("03-keys-revoked")
	revokedAt := time.Now()
	refused := false
	for time.Since(revokedAt) < 5*time.Second {
		if res, _ := do(t, http.MethodGet, w.api.URL+"/api/v1/models", key, nil, nil); res.StatusCode == http.StatusUnauthorized {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("the revoked key is still accepted after 5 s")
	}
	t.Logf("revoked key refused %v after the revoke", time.Since(revokedAt).Round(time.Millisecond))

	// Channel editor: secret and callback headers.
	const secret = "browser-set-secret-0123"
	b.run("set the secret", chromedp.Navigate(b.base+projPath+"/channel"),
		chromedp.WaitVisible(chromedp.CSS("#no-secret")),
		chromedp.SendKeys(chromedp.CSS("#secret"), secret),
		chromedp.Click(chromedp.CSS("#set-secret")),
		chromedp.WaitVisible(chromedp.CSS("#new-secret")))
	b.run("set callback headers",
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="New header name"]`), "X-Console-Team"),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="New header value"]`), "browser"),
		chromedp.Click(chromedp.CSS("#save-headers")),
		chromedp.WaitVisible(chromedp.CSS(`input[value="X-Console-Team"]`)))

	// A webhook message with that secret succeeds (sync), and an async one's
	// callback carries the header.
	hdr := http.Header{"X-Webhook-Secret": {secret}, "Content-Type": {"application/json"}}
	res, body := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"write the console note","senderId":"browser-test","senderName":"Browser"}`), hdr)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "I wrote notes/console.txt") {
		t.Fatalf("sync message: %d %s", res.StatusCode, body)
	}
	var cbMu sync.Mutex
	var cbHeader http.Header
	delivered := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		cbMu.Lock()
		defer cbMu.Unlock()
		if cbHeader == nil {
			cbHeader = r.Header.Clone()
			close(delivered)
		}
	}))
	defer recv.Close()
	res, body = w.do(t, http.MethodPost, "/agent/channels/webhook/incoming",
		[]byte(`{"message":"again, async","callbackUrl":"`+recv.URL+`/cb"}`), hdr)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("async message: %d %s", res.StatusCode, body)
	}
	await(t, delivered, "no callback delivered")
	cbMu.Lock()
	if got := cbHeader.Get("X-Console-Team"); got != "browser" {
		t.Fatalf("callback header X-Console-Team = %q; headers %v", got, cbHeader)
	}
	cbMu.Unlock()
	if res, _ := w.do(t, http.MethodPost, "/agent/channels/webhook/incoming", []byte(`{"message":"x"}`),
		http.Header{"X-Webhook-Secret": {"hook-secret"}, "Content-Type": {"application/json"}}); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a message with the old secret: %d", res.StatusCode)
	}

	// The activity entry appears in the editor (polled by htmx), and the
	// test message button works.
	b.run("activity", chromedp.Navigate(b.base+projPath+"/channel"),
		chromedp.WaitVisible(chromedp.CSS(`#live tr.event.inbound`)))
	activity := value(b, "activity table", chromedp.Text(chromedp.CSS("#live table.activity")))
	if !strings.Contains(activity, "write the console note") || !strings.Contains(activity, "Browser") {
		t.Fatalf("activity table: %q", activity)
	}
	b.run("send a test message", chromedp.Click(chromedp.CSS("#send-test")), chromedp.WaitVisible(chromedp.CSS("#test-result")))
	testResult := value(b, "test result", chromedp.Text(chromedp.CSS("#test-result")))
	if !strings.Contains(testResult, "200") || !strings.Contains(testResult, "I wrote notes/console.txt") {
		t.Fatalf("test message result: %q", testResult)
	}
	assertNoSidewaysScroll(b, "the channel editor")
	b.screenshot("04-channel-editor")

	// Recovery: the range replay form says how many replies it replays.
	b.run("replay a range", chromedp.Click(chromedp.CSS("#replay-range-submit")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := value(b, "replay flash", chromedp.Text(chromedp.CSS("p.flash"))); !strings.Contains(flash, "Replaying") {
		t.Fatalf("range replay answer: %q", flash)
	}

	// Publish (over HTTP with the account's key), then the graph shows the
	// Published badge on the published commit.
	res, body = do(t, http.MethodPost, w.api.URL+"/api/projects/"+w.project+"/publish", w.acc.key,
		[]byte(`{"subdomain":"console"}`), http.Header{"Content-Type": {"application/json"}})
	var pub struct{ SHA, Tag string }
	if res.StatusCode != http.StatusOK || json.Unmarshal(body, &pub) != nil {
		t.Fatalf("publish: %d %s", res.StatusCode, body)
	}
	b.run("graph", chromedp.Navigate(b.base+projPath),
		chromedp.WaitVisible(chromedp.CSS(".graph li.published-commit .badge.published")))
	badgeSubject := value(b, "published subject", chromedp.Text(chromedp.CSS(".graph li.published-commit .subject")))
	if !strings.Contains(badgeSubject, "webhook:") {
		t.Fatalf("the published commit is %q", badgeSubject)
	}
	tagText := value(b, "tag", chromedp.Text(chromedp.CSS(".graph li.published-commit .tag")))
	if !strings.Contains(tagText, pub.Tag) {
		t.Fatalf("tag shown %q, want %q", tagText, pub.Tag)
	}
	b.screenshot("05-project-graph")
	b.run("commit view", chromedp.Click(chromedp.CSS(".graph li.published-commit .subject")), chromedp.WaitVisible(chromedp.CSS("pre.diff")))
	diff := value(b, "diff", chromedp.Text(chromedp.CSS("pre.diff")))
	if !strings.Contains(diff, "+written for the console test") {
		t.Fatalf("diff: %q", diff)
	}
	b.screenshot("06-commit-diff")

	// Usage of the agent's turns, and the projects list.
	b.run("usage", chromedp.Navigate(b.base+wsPath+"/usage"), chromedp.WaitVisible(chromedp.CSS("figure.chart")))
	usage := value(b, "chart legend", chromedp.Text(chromedp.CSS("figure.chart figcaption")))
	if !strings.Contains(usage, "svc-2-0") {
		t.Fatalf("usage chart legend: %q", usage)
	}
	b.screenshot("07-usage")
	b.run("projects", chromedp.Navigate(b.base+wsPath+"/projects"), chromedp.WaitVisible(chromedp.CSS("table.projects")))
	b.screenshot("08-projects")

	// Another workspace's pages are 404 to this user.
	b.run("cross-workspace", chromedp.Navigate(b.base+"/console/w/"+other.workspace+"/keys"))
	h1 := value(b, "heading", chromedp.Text(chromedp.CSS("h1")))
	if h1 != "Not Found" {
		t.Fatalf("another workspace's keys page: %q", h1)
	}
	b.screenshot("09-other-workspace-404")

	// A form post without the CSRF token, from the signed-in page itself.
	b.run("keys page", chromedp.Navigate(b.base+wsPath+"/keys"))
	status := value(b, "csrf-less post", chromedp.Evaluate[int](
		`fetch(location.pathname, {method: "POST", body: new URLSearchParams({name: "no-csrf"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden {
		t.Fatalf("POST without the CSRF token: %v", status)
	}
	b.run("reload", chromedp.Reload())
	keysText := value(b, "keys after csrf-less post", chromedp.Text(chromedp.CSS("table.keys")))
	if strings.Contains(keysText, "no-csrf") {
		t.Fatal("a key was created without the CSRF token")
	}

	// Phone width.
	b.run("phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(b.base+projPath+"/channel"),
		chromedp.WaitVisible(chromedp.CSS("#incoming")))
	assertNoSidewaysScroll(b, "the channel editor at phone width")
	b.screenshot("10-channel-phone")
}

// assertNoSidewaysScroll fails when the page is wider than its viewport.
func assertNoSidewaysScroll(b *browserRun, what string) {
	b.t.Helper()
	widths := value(b, "widths of "+what, chromedp.Evaluate[[]int](
		`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
	if len(widths) != 2 || widths[0] > widths[1] {
		b.t.Errorf("%s scrolls sideways: content %v px wide", what, widths)
	}
}
