package channelcfg_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/agentloop/fakegateway"
	"github.com/svc-dev/svc/podagent/internal/channelcfg"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

func TestFetchCacheAndChange(t *testing.T) {
	t.Parallel()
	gw := fakegateway.New(t, "prj_1", "tok")
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "s1",
		CallbackHeaders: map[string]string{"X-A": "1"}}, 0)
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	c := &channelcfg.Client{API: &internalapi.Client{BaseURL: gw.URL, ProjectID: "prj_1", Token: "tok"},
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ctx := context.Background()

	cfg, err := c.Channel(ctx)
	if err != nil || cfg.Secret != "s1" || cfg.ChannelID != "ch_1" || cfg.CallbackHeaders["X-A"] != "1" {
		t.Fatalf("cfg %+v, %v", cfg, err)
	}
	gw.SetChannel(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "s2"}, 0)
	advance(500 * time.Millisecond)
	if cfg, _ := c.Channel(ctx); cfg.Secret != "s1" || gw.ChannelHits() != 1 {
		t.Fatalf("within the TTL the cache answers: %+v, %d hits", cfg, gw.ChannelHits())
	}
	advance(600 * time.Millisecond)
	if cfg, _ := c.Channel(ctx); cfg.Secret != "s2" || gw.ChannelHits() != 2 {
		t.Fatalf("after the TTL the new secret is seen: %+v", cfg)
	}

	gw.SetChannel(wire.ChannelConfig{}, 500)
	advance(2 * time.Second)
	if _, err := c.Channel(ctx); !errors.Is(err, channelcfg.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}

	bad := &channelcfg.Client{API: &internalapi.Client{BaseURL: gw.URL, ProjectID: "prj_1", Token: "wrong"}}
	if _, err := bad.Channel(ctx); !errors.Is(err, channelcfg.ErrUnavailable) {
		t.Fatalf("wrong token: %v", err)
	}
}

// A fetch that gets no answer in time (an API swamped by a rush of starting
// pods) is tried again within the caller's context; an answer is not.
func TestFetchRetriesWithoutAnswer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-r.Context().Done() // the first call outlasts its timeout
			return
		}
		_ = json.NewEncoder(w).Encode(wire.ChannelConfig{Configured: true, ChannelID: "ch_1", Secret: "s"})
	}))
	defer srv.Close()
	c := &channelcfg.Client{API: &internalapi.Client{BaseURL: srv.URL, ProjectID: "prj_1", Token: "tok"},
		Timeout: 200 * time.Millisecond, Patience: 20 * time.Second}
	cfg, err := c.Channel(context.Background())
	if err != nil || cfg.ChannelID != "ch_1" || calls.Load() != 2 {
		t.Fatalf("Channel = %+v, %v after %d calls; want the second call's answer", cfg, err, calls.Load())
	}
}
