package repoarchive_test

import (
	"slices"
	"testing"

	"github.com/svc-dev/svc/shared/repoarchive"
)

func TestTips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		refs map[string]string
		want []string
	}{
		{"none", nil, nil},
		{"one", map[string]string{"refs/heads/main": "aa"}, []string{"aa"}},
		{"in ref-name order", map[string]string{"refs/tags/v1": "cc", "refs/heads/main": "aa", "refs/heads/b": "bb"},
			[]string{"bb", "aa", "cc"}},
		{"an id once", map[string]string{"refs/heads/main": "aa", "refs/tags/t": "aa", "refs/heads/x": "bb"},
			[]string{"aa", "bb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := repoarchive.Tips(tc.refs); !slices.Equal(got, tc.want) {
				t.Fatalf("Tips = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSameRefs(t *testing.T) {
	t.Parallel()
	main := map[string]string{"refs/heads/main": "aa"}
	for _, tc := range []struct {
		name string
		a, b map[string]string
		want bool
	}{
		{"both empty", nil, map[string]string{}, true},
		{"equal", main, map[string]string{"refs/heads/main": "aa"}, true},
		{"moved", main, map[string]string{"refs/heads/main": "bb"}, false},
		{"renamed", main, map[string]string{"refs/heads/x": "aa"}, false},
		{"added", main, map[string]string{"refs/heads/main": "aa", "refs/tags/t": "aa"}, false},
		{"removed", map[string]string{"refs/heads/main": "aa", "refs/tags/t": "aa"}, main, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := repoarchive.SameRefs(tc.a, tc.b); got != tc.want {
				t.Fatalf("SameRefs(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
