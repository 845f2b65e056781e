package wire

import (
	"testing"
	"time"
)

func TestParseOutboxWaitAndLimit(t *testing.T) {
	t.Parallel()
	waits := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true}, {"0", 0, true}, {"2.5", 2500 * time.Millisecond, true}, {"500ms", 500 * time.Millisecond, true},
		{"31", OutboxMaxWait, true}, {"1e300", OutboxMaxWait, true}, {"1h", OutboxMaxWait, true},
		{"+Inf", OutboxMaxWait, true},
		{"-1", 0, false}, {"-Inf", 0, false}, {"abc", 0, false}, {"NaN", 0, false},
	}
	for _, w := range waits {
		got, err := ParseOutboxWait(w.in)
		if (err == nil) != w.ok || (w.ok && got != w.want) {
			t.Errorf("wait %q = %v, %v; want %v ok=%v", w.in, got, err, w.want, w.ok)
		}
	}
	limits := []struct {
		in   string
		want int
		ok   bool
	}{{"", 20, true}, {"5", 5, true}, {"100", 100, true}, {"1000", 100, true}, {"0", 0, false}, {"-3", 0, false}, {"x", 0, false}}
	for _, l := range limits {
		got, err := ParseOutboxLimit(l.in)
		if (err == nil) != l.ok || (l.ok && got != l.want) {
			t.Errorf("limit %q = %v, %v; want %v ok=%v", l.in, got, err, l.want, l.ok)
		}
	}
}
