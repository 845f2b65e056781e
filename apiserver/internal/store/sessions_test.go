package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// A sign-in link is used once even when two requests race for it, and an
// expired one is refused.
func TestLoginTokenIsConsumedOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		u, _ := st.CreateUser(ctx, store.NewID("u")+"@x.test")
		now := time.Now().UTC()
		for _, h := range []string{"h-live", "h-old"} {
			exp := now.Add(time.Minute)
			if h == "h-old" {
				exp = now.Add(-time.Second)
			}
			if err := st.CreateLoginToken(ctx, store.LoginToken{TokenHash: h, UserID: u.ID, CreatedAt: now, ExpiresAt: exp}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		results := make([]error, 8)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, results[i] = st.ConsumeLoginToken(ctx, "h-live", now)
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range results {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, store.ErrTokenUsed):
				t.Fatalf("unexpected error %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d requests used the link, want 1", wins)
		}
		if _, err := st.ConsumeLoginToken(ctx, "h-old", now); !errors.Is(err, store.ErrTokenUsed) {
			t.Fatalf("expired link: %v", err)
		}
		// Sessions: stored by hash, pruned after their absolute expiry.
		if err := st.CreateSession(ctx, store.Session{TokenHash: "s1", UserID: u.ID, CSRFToken: "c", CreatedAt: now,
			LastSeenAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if n, err := st.PruneSessions(ctx, now.Add(2*time.Hour)); err != nil || n != 3 {
			t.Fatalf("pruned %d (%v), want the session and both links", n, err)
		}
		if _, err := st.GetSession(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("session after prune: %v", err)
		}
	})
}
