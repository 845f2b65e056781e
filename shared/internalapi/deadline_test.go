package internalapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/wire"
)

func TestCallerContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header   string
		deadline bool
		// the callee's bound lies in [min, max]
		min, max time.Duration
	}{
		{header: "", deadline: false},
		{header: "junk", deadline: false},
		{header: "-5", deadline: false},
		{header: "5000", deadline: true, min: 4000 * time.Millisecond, max: 4500 * time.Millisecond},
		{header: "500", deadline: true, min: 300 * time.Millisecond, max: 400 * time.Millisecond},
		{header: "60000", deadline: true, min: 58 * time.Second, max: 59 * time.Second},
		{header: "100", deadline: true, min: 40 * time.Millisecond, max: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if tt.header != "" {
			r.Header.Set(HeaderTimeout, tt.header)
		}
		ctx, cancel := CallerContext(r)
		dl, ok := ctx.Deadline()
		cancel()
		if ok != tt.deadline {
			t.Errorf("%q: deadline %v, want %v", tt.header, ok, tt.deadline)
			continue
		}
		if !ok {
			continue
		}
		if left := time.Until(dl); left < tt.min-50*time.Millisecond || left > tt.max {
			t.Errorf("%q: bound %v, want within [%v, %v]", tt.header, left, tt.min, tt.max)
		}
	}
}

// The typed clients send the call's remaining time, so the callee can bound
// its work by it.
func TestClientsSendTheirTimeout(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(HeaderTimeout)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"sha":"abc"}`))
	}))
	defer srv.Close()
	pc := &PodClient{BaseURL: srv.URL, Token: "t", Timeout: 7 * time.Second}
	if _, err := pc.GitFlush(context.Background(), wire.GitFlushRequest{}); err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(<-got)
	if err != nil || ms <= 6000 || ms > 7000 {
		t.Fatalf("%s = %d (%v), want the 7 s call timeout", HeaderTimeout, ms, err)
	}
}
