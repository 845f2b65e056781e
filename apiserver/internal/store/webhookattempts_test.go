package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/wire"
)

func attempt(pid, chID, id, corr, url, outcome string, at time.Time) store.WebhookAttempt {
	return store.WebhookAttempt{ID: id, ProjectID: pid, ChannelID: chID, CorrelationID: corr, WebhookID: "msg_" + corr,
		Kind: wire.AttemptDelivery, Attempt: 1, URL: url, Endpoint: wire.WebhookEndpoint(url), AttemptedAt: at,
		StatusCode: 503, Outcome: outcome}
}

// Attempts are stored once per id (a pod re-sending a batch stores
// nothing twice), listed newest first page by page, and the endpoint's
// streak of failures marks it failing once it lasted the period; one
// success re-enables it. Pruning removes what is past the retention.
func TestWebhookAttemptsLogAndEndpointHealth(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, chID string) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		const url = "https://hooks.example/cb?token=1"
		var batch []store.WebhookAttempt
		for i, at := range []time.Duration{0, time.Hour, 3 * time.Hour} {
			batch = append(batch, attempt(pid, chID, "att_"+string(rune('a'+i)), "cor_1", url, wire.AttemptRetrying, t0.Add(at)))
		}
		n, changes, err := s.RecordWebhookAttempts(ctx, batch, 2*time.Hour, t0.Add(3*time.Hour))
		if err != nil || n != 3 {
			t.Fatalf("record: %d %v", n, err)
		}
		if len(changes) != 1 || !changes[0].Failing || changes[0].Endpoint.ConsecutiveFailures != 3 {
			t.Fatalf("changes = %+v, want the endpoint marked failing after 3 failures over 3h (period 2h)", changes)
		}
		again, changes, err := s.RecordWebhookAttempts(ctx, batch, 2*time.Hour, t0.Add(4*time.Hour))
		if err != nil || again != 0 || len(changes) != 0 {
			t.Fatalf("a re-sent batch stored %d (changes %v, %v), want nothing", again, changes, err)
		}
		failing, err := s.ListWebhookEndpoints(ctx, pid, true)
		if err != nil || len(failing) != 1 || failing[0].Endpoint != "https://hooks.example/cb" || failing[0].ConsecutiveFailures != 3 {
			t.Fatalf("failing endpoints = %+v %v (the query is not part of the endpoint)", failing, err)
		}

		// Newest first, two per page.
		page, err := s.ListWebhookAttempts(ctx, pid, "", nil, 2)
		if err != nil || len(page) != 2 || page[0].ID != "att_c" || page[1].ID != "att_b" {
			t.Fatalf("first page: %+v %v", page, err)
		}
		rest, err := s.ListWebhookAttempts(ctx, pid, "", &store.AttemptCursor{At: page[1].AttemptedAt, ID: page[1].ID}, 2)
		if err != nil || len(rest) != 1 || rest[0].ID != "att_a" {
			t.Fatalf("second page: %+v %v", rest, err)
		}

		// One success re-enables the endpoint.
		ok := attempt(pid, chID, "att_ok", "cor_test", url, wire.AttemptDelivered, t0.Add(5*time.Hour))
		ok.StatusCode = 200
		_, changes, err = s.RecordWebhookAttempts(ctx, []store.WebhookAttempt{ok}, 2*time.Hour, t0.Add(5*time.Hour))
		if err != nil || len(changes) != 1 || changes[0].Failing {
			t.Fatalf("after a success: %+v %v, want one re-enable", changes, err)
		}
		if f, _ := s.ListWebhookEndpoints(ctx, pid, true); len(f) != 0 {
			t.Fatalf("still failing: %+v", f)
		}

		// The final state comes from the outbox record.
		if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: "cor_1",
			Reply: "r"}); err != nil {
			t.Fatal(err)
		}
		states, err := s.MessageStates(ctx, pid, []string{"cor_1", "cor_test"}, t0)
		if err != nil || states["cor_1"] != wire.MessageInOutbox || states["cor_test"] != "" {
			t.Fatalf("states = %v %v", states, err)
		}
		if _, err := s.TakeOutbox(ctx, pid, chID, 10); err != nil {
			t.Fatal(err)
		}
		if states, _ = s.MessageStates(ctx, pid, []string{"cor_1"}, t0); states["cor_1"] != wire.MessageFetched {
			t.Fatalf("after a poll: %v", states)
		}

		pruned, err := s.PruneWebhookAttempts(ctx, t0.Add(2*time.Hour))
		if err != nil || pruned != 2 {
			t.Fatalf("pruned %d %v, want the two attempts older than the cutoff", pruned, err)
		}
	})
}

// One 410 Gone answer marks the endpoint failing at once, whatever the
// failing period; other failures before the period do not; a success
// re-enables it.
func TestGoneDisablesEndpointAtOnce(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, chID string) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		const url = "https://hooks.example/gone"
		for i, tc := range []struct {
			status, failing int
			outcome         string
			want            []bool
		}{
			{404, 0, wire.AttemptFailed, nil},
			{410, 1, wire.AttemptFailed, []bool{true}},
			{200, 0, wire.AttemptDelivered, []bool{false}},
		} {
			a := attempt(pid, chID, "att_g"+strconv.Itoa(i), "cor_g"+strconv.Itoa(i), url, tc.outcome, t0.Add(time.Duration(i)*time.Minute))
			a.StatusCode = tc.status
			_, changes, err := s.RecordWebhookAttempts(ctx, []store.WebhookAttempt{a}, 120*time.Hour, a.AttemptedAt)
			if err != nil || len(changes) != len(tc.want) {
				t.Fatalf("%d: changes %+v %v, want %v", tc.status, changes, err, tc.want)
			}
			for j, w := range tc.want {
				if changes[j].Failing != w {
					t.Fatalf("%d: change %+v, want failing=%v", tc.status, changes[j], w)
				}
			}
			failing, err := s.ListWebhookEndpoints(ctx, pid, true)
			if err != nil || len(failing) != tc.failing {
				t.Fatalf("after %d: failing %+v %v, want %d", tc.status, failing, err, tc.failing)
			}
		}
	})
}

// A rotation keeps the old secret valid for the overlap; dropping it ends
// the overlap at once, and the janitor's prune forgets expired ones.
func TestChannelSecretRotation(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, _ string) {
		ch, err := s.RotateChannelSecret(ctx, pid, "new-secret-value", time.Hour)
		if err != nil || ch.Secret != "new-secret-value" {
			t.Fatalf("rotate: %+v %v", ch, err)
		}
		now := time.Now()
		if got := ch.PreviousSecrets(now); len(got) != 1 || got[0] != "s" {
			t.Fatalf("previous during the overlap = %v, want the old secret", got)
		}
		if got := ch.PreviousSecrets(now.Add(2 * time.Hour)); len(got) != 0 {
			t.Fatalf("previous after the overlap = %v", got)
		}
		if n, err := s.PruneExpiredSecrets(ctx, now.Add(2*time.Hour)); err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
		ch, _ = s.RotateChannelSecret(ctx, pid, "third", time.Hour)
		if ch.PreviousSecret != "new-secret-value" {
			t.Fatalf("second rotation kept %q", ch.PreviousSecret)
		}
		ch, err = s.DropPreviousSecret(ctx, pid)
		if err != nil || ch.PreviousSecret != "" || len(ch.PreviousSecrets(now)) != 0 || ch.Secret != "third" {
			t.Fatalf("drop: %+v %v", ch, err)
		}
	})
}

// BenchmarkRecordWebhookAttempts is the attempt log's database write cost
// per attempt (insert and endpoint health update), in batches of 20 as the
// pod hands them over:
//
//	go run ./cmd/svc-testenv -- bash -c 'cd ../../apiserver && GOWORK=off go test -run "^$" -bench RecordWebhookAttempts ./internal/store/'
func BenchmarkRecordWebhookAttempts(b *testing.B) {
	for _, dc := range []struct {
		name string
		open func(testing.TB) *store.Store
	}{{"sqlite", storetest.SQLite}, {"postgres", storetest.Postgres}} {
		b.Run(dc.name, func(b *testing.B) {
			s := dc.open(b)
			ctx := context.Background()
			ws, err := s.CreateWorkspace(ctx, "bench", "free")
			if err != nil {
				b.Fatal(err)
			}
			p, err := s.CreateProject(ctx, ws.ID, "bench")
			if err != nil {
				b.Fatal(err)
			}
			sec := "s"
			ch, err := s.SetChannel(ctx, p.ID, &sec, nil)
			if err != nil {
				b.Fatal(err)
			}
			const batch = 20
			t0 := time.Now()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				rows := make([]store.WebhookAttempt, 0, batch)
				for j := i; j < min(i+batch, b.N); j++ {
					rows = append(rows, attempt(p.ID, ch.ID, store.NewID("att"), "cor_"+strconv.Itoa(j/3), "https://hooks.example/cb",
						wire.AttemptRetrying, t0.Add(time.Duration(j)*time.Millisecond)))
				}
				if _, _, err := s.RecordWebhookAttempts(ctx, rows, time.Hour, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
