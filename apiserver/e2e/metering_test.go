package e2e

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

type usageSnapshot struct {
	requests, prompt, completion, reasoning, credits int64
}

func usageOf(t *testing.T, e *env, workspace string) usageSnapshot {
	t.Helper()
	m := e.admin("usage", "show", "--workspace", workspace)["totals"].(map[string]any)
	n := func(k string) int64 { return int64(m[k].(float64)) }
	return usageSnapshot{n("requests"), n("promptTokens"), n("completionTokens"), n("reasoningTokens"), n("creditsMicro")}
}

// waitUsage polls the database until n requests are recorded (the record is
// written after the answer's last byte) or the deadline passes.
func waitUsage(t *testing.T, e *env, workspace string, n int64) usageSnapshot {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		u := usageOf(t, e, workspace)
		if u.requests >= n {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage of %s: %d requests recorded after 15 s, want at least %d", workspace, u.requests, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Plain, streamed and client-aborted requests record exactly what the
// upstream reported, and credits follow the model price.
func TestMeteringIsExact(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	var n atomic.Int64
	holds := make(chan chan struct{}, 8)
	e.upstream.Script(func(r fakeupstream.Request) fakeupstream.Reply {
		i := n.Add(1)
		rep := fakeupstream.Reply{Text: "w1 w2 w3", PromptTokens: 100 + i, CompletionTokens: 10 * i, ReasoningTokens: i}
		if last(r) == "abort" {
			h := make(chan struct{})
			rep.Hold = h
			holds <- h
		}
		return rep
	})
	c := client(a.URL+"/v1", acc.key)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := c.Chat.Completions.New(ctx, userMsg("plain"))
		must(t, err)
	}
	for i := 0; i < 3; i++ {
		s := c.Chat.Completions.NewStreaming(ctx, userMsg("stream"))
		for s.Next() {
		}
		must(t, s.Err())
	}
	// Client aborts after the first chunk; the upstream then finishes.
	for i := 0; i < 2; i++ {
		actx, cancel := context.WithCancel(ctx)
		s := c.Chat.Completions.NewStreaming(actx, userMsg("abort"))
		if !s.Next() {
			t.Fatalf("no first chunk: %v", s.Err())
		}
		cancel()
		s.Close()
		close(<-holds)
	}
	const total = 8
	u := waitUsage(t, e, acc.workspace, total)
	want := e.upstream.Reported()
	if want.Answers != total {
		t.Fatalf("the fake finished %d answers, want %d", want.Answers, total)
	}
	if u.requests != total || u.prompt != want.Prompt || u.completion != want.Completion || u.reasoning != want.Reasoning {
		t.Fatalf("metered %+v, upstream reported %+v", u, want)
	}
	// svc-2-0 costs 3 per Mtok in, 15 per Mtok out: micro-credits = tokens × price.
	if wantCredits := 3*want.Prompt + 15*want.Completion; u.credits != wantCredits {
		t.Fatalf("credits %d, want %d", u.credits, wantCredits)
	}
}

func last(r fakeupstream.Request) string {
	msgs, _ := r.Body["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	m, _ := msgs[len(msgs)-1].(map[string]any)
	s, _ := m["content"].(string)
	return s
}

// Two replicas on one database admit exactly the plan's requests per minute.
func TestRateLimitSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	replicas := []*api{e.startAPI(), e.startAPI()}
	const limit = 3 // the slow plan
	for attempt := 0; attempt < 3; attempt++ {
		acc := e.account("slow")
		minute := time.Now().Truncate(time.Minute)
		var ok, limited atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := client(replicas[i%2].URL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("x"))
				var ae *openai.Error
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &ae) && ae.StatusCode == 429:
					limited.Add(1)
				default:
					t.Error(err)
				}
			}(i)
		}
		wg.Wait()
		if time.Now().Truncate(time.Minute) != minute {
			continue // the burst straddled two windows; run it again in one
		}
		if ok.Load() != limit || limited.Load() != 10-limit {
			t.Fatalf("admitted %d and limited %d, want %d and %d", ok.Load(), limited.Load(), limit, 10-limit)
		}
		return
	}
	t.Fatal("could not run the burst inside one minute window")
}

// assertOnlyNextIsMetered proves that nothing before it was metered: usage is
// written in order, so after one good request lands, exactly one record
// exists.
func assertOnlyNextIsMetered(t *testing.T, e *env, a *api, acc account) {
	t.Helper()
	if _, err := client(a.URL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("good")); err != nil {
		t.Fatal(err)
	}
	if u := waitUsage(t, e, acc.workspace, 1); u.requests != 1 {
		t.Fatalf("want exactly the one good request metered, got %+v", u)
	}
}
