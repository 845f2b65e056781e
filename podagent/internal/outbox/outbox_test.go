package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/wire"
)

func msg(i int) wire.OutboxMessage {
	return wire.OutboxMessage{ID: fmt.Sprintf("m%d", i), OutboxReply: wire.OutboxReply{CorrelationID: fmt.Sprintf("c%d", i), Reply: "r"}}
}

func TestTakeReturnsAndAcknowledges(t *testing.T) {
	t.Parallel()
	o := outbox.New(0)
	for i := range 130 {
		o.Put("ch", msg(i))
	}
	o.Put("other", msg(999))
	ctx := context.Background()
	got := o.Take(ctx, "ch", 0, 0) // default limit
	if len(got) != outbox.DefaultLimit || got[0].ID != "m0" || got[19].ID != "m19" {
		t.Fatalf("first take: %d %v", len(got), got[0])
	}
	got = o.Take(ctx, "ch", 500, 0) // capped at MaxLimit
	if len(got) != outbox.MaxLimit || got[0].ID != "m20" {
		t.Fatalf("second take: %d", len(got))
	}
	got = o.Take(ctx, "ch", 100, 0)
	if len(got) != 10 || got[9].ID != "m129" || o.Len("ch") != 0 {
		t.Fatalf("third take: %d, left %d", len(got), o.Len("ch"))
	}
	if got := o.Take(ctx, "ch", 10, 0); got == nil || len(got) != 0 {
		t.Fatalf("empty take = %#v", got)
	}
	if o.Len("other") != 1 {
		t.Fatal("another channel's message was taken")
	}
}

func TestLongPollWakesOnPut(t *testing.T) {
	t.Parallel()
	o := outbox.New(0)
	res := make(chan []wire.OutboxMessage)
	go func() { res <- o.Take(context.Background(), "ch", 5, time.Minute) }()
	o.Put("other", msg(1)) // wakes the poller, which goes back to waiting
	o.Put("ch", msg(2))
	got := <-res
	if len(got) != 1 || got[0].ID != "m2" {
		t.Fatalf("got %v", got)
	}
}

func TestLongPollEndsWithContext(t *testing.T) {
	t.Parallel()
	o := outbox.New(0)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan []wire.OutboxMessage)
	go func() { res <- o.Take(ctx, "ch", 5, outbox.MaxWait) }()
	cancel()
	if got := <-res; len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}

func TestCapacityAndRequeue(t *testing.T) {
	t.Parallel()
	o := outbox.New(3)
	for i := range 5 {
		o.Put("ch", msg(i))
	}
	if o.Len("ch") != 3 || o.Dropped() != 2 {
		t.Fatalf("len %d dropped %d", o.Len("ch"), o.Dropped())
	}
	got := o.Take(context.Background(), "ch", 2, 0)
	o.Requeue("ch", got)
	again := o.Take(context.Background(), "ch", 3, 0)
	if len(again) != 3 || again[0].ID != "m2" || again[2].ID != "m4" {
		t.Fatalf("after requeue: %v", again)
	}
}
