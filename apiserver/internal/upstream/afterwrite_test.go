package upstream

import (
	"context"
	"testing"
	"time"
)

// countWritten counts its calls and runs then, once.
type countWritten struct {
	calls int
	then  func()
}

func (w *countWritten) Written() {
	w.calls++
	if w.calls == 1 {
		w.then()
	}
}

// TestH1CallsWrittenBeforeTheAnswer: /slow answers only once released, and
// Written releases it, so the exchange completes only when Written ran
// after the write and before the read.
func TestH1CallsWrittenBeforeTheAnswer(t *testing.T) {
	s := newH1Server(t)
	tr := newTestH1(Options{})
	w := &countWritten{then: func() { close(s.release) }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := post(WithWritten(ctx, w), t, tr, s.URL+"/slow")
	if err != nil {
		t.Fatalf("the exchange did not complete (Written not called before the read?): %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || w.calls != 1 {
		t.Fatalf("status %d, Written called %d times; want 200, once", resp.StatusCode, w.calls)
	}
}

// TestH1WithoutWritten: a context without Written is sent as before.
func TestH1WithoutWritten(t *testing.T) {
	s := newH1Server(t)
	resp, err := post(context.Background(), t, newTestH1(Options{}), s.URL+"/plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
