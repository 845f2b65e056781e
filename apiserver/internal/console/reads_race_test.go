package console_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/hydrate/hydratetest"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/objstore/fs"
)

// Console project pages and the checkpoint API read the same project at
// once (docs/design.md §5: the server builds one checkpoint-reads value and
// both surfaces share it). Under -race no read may write shared state:
// afterwards every page and every API read answered 200.
func TestConsoleAndAPIReadsConcurrently(t *testing.T) {
	t.Parallel()
	st := storetest.Postgres(t)
	objs, err := fs.New(filepath.Join(t.TempDir(), "objects"), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hyd := hydratetest.NewManager(t, hydrate.Options{Store: objs, Dir: filepath.Join(t.TempDir(), "hydrated"), Checkpoints: st}, nil)
	w := newWorldTB(t, st, hyd)
	key, err := apikey.Issue(context.Background(), st, w.wsA.ID, w.member.ID, "reader")
	if err != nil {
		t.Fatal(err)
	}
	work := hydratetest.NewWork(t)
	sha := work.Commit("turn", map[string]string{"notes.txt": "hello\n"})
	work.Persist(objs, w.projA.ID)

	b := w.browser(t)
	b.signIn(w.member)
	page := "/console/w/" + w.wsA.ID + "/projects/" + w.projA.ID
	api := w.url + "/api/projects/" + w.projA.ID + "/checkpoints"

	const rounds = 8
	var wg sync.WaitGroup
	status := make(chan string, 4*rounds)
	for i := 0; i < rounds; i++ {
		wg.Add(4)
		go func() {
			defer wg.Done()
			if r := b.status(page); r != "200 OK" {
				status <- "console project page: " + r
			}
		}()
		go func() {
			defer wg.Done()
			if r := b.status(page + "/commits/" + sha); r != "200 OK" {
				status <- "console commit page: " + r
			}
		}()
		for _, path := range []string{"/graph", "/diff?to=" + sha} {
			go func() {
				defer wg.Done()
				resp, err := http.DefaultClient.Do(bearer(api+path, key.Key))
				if err != nil {
					status <- path + ": " + err.Error()
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					status <- "api " + path + ": " + resp.Status
				}
			}()
		}
	}
	wg.Wait()
	close(status)
	for s := range status {
		t.Error(s)
	}
}

func bearer(u, key string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	return req
}

// status GETs path and returns the response's status or the error (safe
// from any goroutine: it never stops the test).
func (b *browser) status(path string) string {
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return resp.Status
}
