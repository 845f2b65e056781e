package gateway

import (
	"net/http"
	"regexp"
	"testing"
	"time"
)

// The overhead headers: one value each, in their formats, and an added
// value of one does not touch the other (they share a backing array).
func TestTimingHeaders(t *testing.T) {
	start := time.Now().Add(-5 * time.Millisecond)
	tm := &timing{start: start, authEnd: start.Add(time.Millisecond), admit: 2 * time.Millisecond, upstream: time.Millisecond}
	h := http.Header{}
	tm.writeHeaders(h)
	overhead, st := h.Values(HeaderOverhead), h.Values(HeaderServerTiming)
	if len(overhead) != 1 || !regexp.MustCompile(`^\d+\.\d{3}$`).MatchString(overhead[0]) {
		t.Fatalf("%s: %q", HeaderOverhead, overhead)
	}
	if len(st) != 1 || st[0] != "auth;dur=1.000, admit;dur=2.000, upstream;dur=1.000" {
		t.Fatalf("%s: %q", HeaderServerTiming, st)
	}
	h.Add(HeaderOverhead, "x")
	if got := h.Values(HeaderServerTiming); len(got) != 1 || got[0] != st[0] {
		t.Fatalf("%s after an Add to %s: %q", HeaderServerTiming, HeaderOverhead, got)
	}
}
