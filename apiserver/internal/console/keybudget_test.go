package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// The console's budget form (Settings › API keys): an owner sets a key's
// budget and the page shows it; bad input is refused with a message and
// changes nothing; a member cannot set one; empty credits remove it.
func TestKeyBudgetForm(t *testing.T) {
	t.Parallel()
	storetest.EachWith(t, newWorld, func(t *testing.T, w *world) {
		ctx := context.Background()
		k, err := apikey.Issue(ctx, w.st, w.wsA.ID, w.owner.ID, "ci")
		if err != nil {
			t.Fatal(err)
		}
		owner, member := w.browser(t), w.browser(t)
		owner.signIn(w.owner)
		member.signIn(w.member)
		keys := "/console/w/" + w.wsA.ID + "/keys"
		form := keys + "/" + k.ID + "/budget"
		tok := owner.csrf(keys)
		for _, c := range []struct {
			name, credits, window string
			want                  int
		}{
			{"not a number", "five", "daily", http.StatusBadRequest},
			{"zero", "0", "daily", http.StatusBadRequest},
			{"unknown window", "5", "weekly", http.StatusBadRequest},
			{"set", "5", "monthly", http.StatusOK},
		} {
			r := owner.do(http.MethodPost, form, url.Values{"csrf": {tok}, "credits": {c.credits}, "window": {c.window}}, nil)
			if r.status != c.want {
				t.Fatalf("%s: %d, want %d", c.name, r.status, c.want)
			}
			if c.want == http.StatusBadRequest {
				if _, err := w.st.GetKeyBudget(ctx, k.ID); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s: a refused form changed the budget (%v)", c.name, err)
				}
			}
		}
		b, err := w.st.GetKeyBudget(ctx, k.ID)
		if err != nil || b.LimitMicro != 5_000_000 || b.BudgetWindow != store.BudgetMonthly {
			t.Fatalf("budget after the form: %+v %v", b, err)
		}
		if r := owner.get(keys); !strings.Contains(r.body, "0.00 / 5.00 monthly") {
			t.Fatalf("keys page does not show the budget:\n%s", r.body)
		}
		mt := member.csrf(keys)
		if r := member.do(http.MethodPost, form, url.Values{"csrf": {mt}, "credits": {""}}, nil); r.status != http.StatusForbidden {
			t.Fatalf("member clearing a budget: %d, want 403", r.status)
		}
		if r := owner.do(http.MethodPost, form, url.Values{"csrf": {tok}, "credits": {""}}, nil); r.status != http.StatusOK {
			t.Fatalf("clearing: %d", r.status)
		}
		if _, err := w.st.GetKeyBudget(ctx, k.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("budget after clearing: %v, want none", err)
		}
	})
}
