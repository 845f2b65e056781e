package pause_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/pause"
)

func TestFor(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"elapses", context.Background(), time.Millisecond, nil},
		{"zero returns at once", cancelled, 0, nil},
		{"negative returns at once", cancelled, -time.Second, nil},
		{"a done context ends the wait", cancelled, time.Hour, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := pause.For(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("For(%v) = %v, want %v", tc.d, err, tc.want)
			}
		})
	}
}
