package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/wire"
)

func outboxFixture(t *testing.T, s *store.Store) (projectID, channelID string) {
	t.Helper()
	p := newProject(t, s, "hook")
	sec := "s"
	ch, err := s.SetChannel(context.Background(), p.ID, &sec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.ID, ch.ID
}

// eachChannel runs test on both dialects, each with the webhook channel of
// a new project.
func eachChannel(t *testing.T, test func(ctx context.Context, t *testing.T, s *store.Store, projectID, channelID string)) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		pid, chID := outboxFixture(t, s)
		test(context.Background(), t, s, pid, chID)
	})
}

func TestOutboxPutIsIdempotentAndTakeAcknowledges(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, chID string) {
		t0 := time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)
		put := func(corr string, at time.Time, reply string) (store.OutboxMessage, bool) {
			t.Helper()
			m, created, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: corr,
				Reply: reply, Metadata: `{"k":"v"}`, CreatedAt: at})
			if err != nil {
				t.Fatal(err)
			}
			return m, created
		}
		// Put out of order: the take returns the oldest first.
		b, created := put("cor_b", t0.Add(time.Second), "second")
		if !created || b.ID == "" {
			t.Fatalf("first put: created=%v %+v", created, b)
		}
		a, _ := put("cor_a", t0, "first")
		put("cor_c", t0.Add(2*time.Second), "third")
		again, created := put("cor_b", t0.Add(time.Hour), "changed")
		if created || again.ID != b.ID || again.Reply != "second" {
			t.Fatalf("second put of cor_b: created=%v %+v, want the existing row unchanged", created, again)
		}
		if n, _ := s.CountOutbox(ctx, pid, chID); n != 3 {
			t.Fatalf("pending = %d, want 3", n)
		}
		got, err := s.TakeOutbox(ctx, pid, chID, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != a.ID || got[1].ID != b.ID || got[0].Reply != "first" || got[0].Metadata != `{"k":"v"}` ||
			!got[0].CreatedAt.Equal(t0) || got[0].DeliveredAt == nil {
			t.Fatalf("take = %+v", got)
		}
		// Another channel id (or project) sees nothing.
		if other, _ := s.TakeOutbox(ctx, pid, "ch_other", 10); len(other) != 0 {
			t.Fatalf("other channel took %+v", other)
		}
		rest, _ := s.TakeOutbox(ctx, pid, chID, 10)
		if len(rest) != 1 || rest[0].CorrelationID != "cor_c" {
			t.Fatalf("second take = %+v", rest)
		}
		if none, _ := s.TakeOutbox(ctx, pid, chID, 10); len(none) != 0 {
			t.Fatalf("acknowledged messages came back: %+v", none)
		}
		// A pod retrying a message already fetched does not deliver it twice.
		if _, created := put("cor_a", t0, "first"); created {
			t.Fatal("a retried put of a fetched message created a row")
		}
		if none, _ := s.TakeOutbox(ctx, pid, chID, 10); len(none) != 0 {
			t.Fatalf("a retried put made a fetched message pending again: %+v", none)
		}
		// Released messages (an answer that could not be written) come back.
		if err := s.ReleaseOutbox(ctx, pid, []string{rest[0].ID}); err != nil {
			t.Fatal(err)
		}
		if back, _ := s.TakeOutbox(ctx, pid, chID, 10); len(back) != 1 || back[0].ID != rest[0].ID {
			t.Fatalf("after release: %+v", back)
		}
		// Delivered rows are pruned after the retention.
		if n, err := s.PruneOutbox(ctx, time.Now().Add(time.Minute)); err != nil || n != 3 {
			t.Fatalf("prune = %d, %v; want 3", n, err)
		}
	})
}

// Concurrent takers never return the same message (Postgres: FOR UPDATE
// SKIP LOCKED; SQLite: one connection) and together return every one.
func TestOutboxConcurrentTakersNeverShare(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, chID string) {
		const total = 200
		for i := range total {
			if _, _, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID,
				CorrelationID: fmt.Sprintf("cor_%03d", i), Reply: "r"}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu   sync.Mutex
			seen = map[string]int{}
			wg   sync.WaitGroup
		)
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					got, err := s.TakeOutbox(ctx, pid, chID, 3)
					if err != nil {
						t.Error(err)
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, m := range got {
						seen[m.CorrelationID]++
					}
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(seen) != total {
			t.Fatalf("takers returned %d distinct messages, want %d", len(seen), total)
		}
		for corr, n := range seen {
			if n != 1 {
				t.Fatalf("%s returned %d times", corr, n)
			}
		}
	})
}

// The API's record of an accepted async message. Before its
// deadline a poll does not see it; a delivery notice closes it for good; a
// reply replaces it; one nothing answered comes out unanswered after its
// deadline, and a reply arriving later is served again, replied.
func TestOutboxAcceptedMessagesNeverVanish(t *testing.T) {
	t.Parallel()
	eachChannel(t, func(ctx context.Context, t *testing.T, s *store.Store, pid, chID string) {
		now := time.Now()
		for corr, deadline := range map[string]time.Time{"cor_future": now.Add(time.Hour), "cor_lost": now.Add(-time.Second),
			"cor_delivered": now.Add(-time.Second), "cor_replied": now.Add(time.Hour)} {
			if err := s.AcceptOutbox(ctx, pid, chID, corr, deadline); err != nil {
				t.Fatal(err)
			}
		}
		put := func(corr, reply, status string) bool {
			t.Helper()
			_, created, err := s.PutOutbox(ctx, store.OutboxMessage{ProjectID: pid, ChannelID: chID, CorrelationID: corr,
				Reply: reply, Status: status})
			if err != nil {
				t.Fatal(err)
			}
			return created
		}
		if !put("cor_delivered", "r", wire.OutboxStatusDelivered) || !put("cor_replied", "the reply", "") {
			t.Fatal("a notice or a reply over an accepted record must replace it")
		}
		if put("cor_replied", "again", "") {
			t.Fatal("a second reply must change nothing")
		}
		// A quicker pod: the notice came before the proxy's record.
		put("cor_early", "", wire.OutboxStatusDelivered)
		if err := s.AcceptOutbox(ctx, pid, chID, "cor_early", now.Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.CountOutbox(ctx, pid, chID); n != 2 {
			t.Fatalf("servable %d, want cor_replied and cor_lost", n)
		}
		got, err := s.TakeOutbox(ctx, pid, chID, 10)
		if err != nil {
			t.Fatal(err)
		}
		status := map[string]string{}
		for _, m := range got {
			status[m.CorrelationID] = m.Status + ":" + m.Reply
		}
		if len(got) != 2 || status["cor_replied"] != "replied:the reply" || status["cor_lost"] != "unanswered:" {
			t.Fatalf("taken %v", status)
		}
		// The lost message's reply arrives after all: served again, replied.
		if !put("cor_lost", "late but here", "") {
			t.Fatal("a reply over an unanswered record must replace it")
		}
		got, err = s.TakeOutbox(ctx, pid, chID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].CorrelationID != "cor_lost" || got[0].Status != "replied" || got[0].Reply != "late but here" {
			t.Fatalf("after the late reply %+v", got)
		}
	})
}
