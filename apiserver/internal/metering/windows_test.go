package metering

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// A committed write adds its credits to entries read before it began; an
// entry read while it ran, lacking a window it touched, or holding that
// window expired is dropped, and a failed write drops its workspaces.
func TestWindowCacheWrites(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1_000_000)
	nowMs := at.UnixMilli() + 10
	win := func(name string, credits, resetsAt int64) store.UsageWindow {
		return store.UsageWindow{WorkspaceID: "w", WindowName: name, CreditsMicro: credits, ResetsAt: resetsAt}
	}
	for _, tc := range []struct {
		name       string
		cached     []store.UsageWindow
		readDuring bool // the entry was read after the write began
		credits    map[string]int64
		fail       bool
		want       []store.UsageWindow // nil: dropped
	}{
		{name: "adds to every window", cached: []store.UsageWindow{win("5h", 100, nowMs+1), win("7d", 900, nowMs+1)},
			credits: map[string]int64{"5h": 5, "7d": 5}, want: []store.UsageWindow{win("5h", 105, nowMs+1), win("7d", 905, nowMs+1)}},
		{name: "no windows touched", cached: []store.UsageWindow{win("5h", 100, nowMs+1)},
			credits: map[string]int64{}, want: []store.UsageWindow{win("5h", 100, nowMs+1)}},
		{name: "read while the write ran", cached: []store.UsageWindow{win("5h", 100, nowMs+1)}, readDuring: true,
			credits: map[string]int64{"5h": 5}},
		{name: "window not cached yet", cached: []store.UsageWindow{},
			credits: map[string]int64{"5h": 5}},
		{name: "window expired (the store restarted it)", cached: []store.UsageWindow{win("5h", 100, nowMs)},
			credits: map[string]int64{"5h": 5}},
		{name: "write failed", cached: []store.UsageWindow{win("5h", 100, nowMs+1)}, fail: true,
			credits: map[string]int64{"5h": 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c windowCache
			if !tc.readDuring {
				c.put("w", tc.cached, at, c.generation())
			}
			gen := c.beginWrite()
			if tc.readDuring {
				c.put("w", tc.cached, at, c.generation())
			}
			before := slices.Clone(tc.cached)
			if tc.fail {
				c.failed("w")
			} else {
				c.written(map[string]map[string]int64{"w": tc.credits, "other": {"5h": 1}}, nowMs, gen)
			}
			got, ok := c.get("w", at)
			if tc.want == nil {
				if ok {
					t.Fatalf("entry kept: %+v, want it dropped", got)
				}
			} else if !ok || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("entry %+v (held %v), want %+v", got, ok, tc.want)
			}
			if !reflect.DeepEqual(tc.cached, before) {
				t.Fatalf("the slice a reader holds changed: %+v, was %+v", tc.cached, before)
			}
			if _, ok := c.get("other", at); ok {
				t.Fatal("a workspace never read got an entry")
			}
		})
	}
}

// A read that a write overtook (began before it, ends after) is not cached.
func TestWindowCacheReadOvertaken(t *testing.T) {
	t.Parallel()
	var c windowCache
	gen := c.generation()
	c.beginWrite()
	c.put("w", []store.UsageWindow{{WindowName: "5h"}}, time.UnixMilli(0), gen)
	if _, ok := c.get("w", time.UnixMilli(0)); ok {
		t.Fatal("a read overtaken by a write was cached")
	}
}
