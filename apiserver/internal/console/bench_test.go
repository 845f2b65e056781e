package console_test

import (
	"net/http"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// BenchmarkSignedInPage is one signed-in page view on PostgreSQL: the
// session lookup, the membership check, the page's reads and the render
// (the API keys page with 20 keys).
func BenchmarkSignedInPage(b *testing.B) {
	st := storetest.Postgres(b)
	w := newWorldTB(b, st, nil)
	br := w.browser(b)
	br.signIn(w.owner)
	page := "/console/w/" + w.wsA.ID + "/keys"
	tok := br.csrf(page)
	for i := 0; i < 20; i++ {
		br.do(http.MethodPost, page, map[string][]string{"csrf": {tok}, "name": {"k"}}, nil)
	}
	b.ResetTimer()
	for b.Loop() {
		if r := br.get(page); r.status != http.StatusOK {
			b.Fatalf("%d", r.status)
		}
	}
}
