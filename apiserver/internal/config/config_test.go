package config_test

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/config"
)

// The large-file retention job is off unless an operator sets its interval
// (spec 10.3: objects are never auto-pruned; docs/sync-modes.md §4).
func TestLFSGCIsOffByDefault(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want time.Duration
	}{
		{"default", nil, 0},
		{"enabled by the setting", []string{"-lfs-gc-interval", "24h"}, 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := config.Parse("apiserver", tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if c.LFSGCInterval != tc.want {
				t.Fatalf("LFSGCInterval = %v, want %v", c.LFSGCInterval, tc.want)
			}
		})
	}
}
