package syncmode_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/syncmode"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want syncmode.Mode
		ok   bool
	}{
		{"", syncmode.GitOnly, true},
		{"git_only", syncmode.GitOnly, true},
		{"dual_shadow", syncmode.DualShadow, true},
		{"s3", syncmode.S3, true},
		{"S3", "", false},
		{"gitonly", "", false},
	}
	for _, tc := range cases {
		got, err := syncmode.Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v", tc.in, got, err)
		}
	}
}
