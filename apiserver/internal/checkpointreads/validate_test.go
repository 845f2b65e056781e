package checkpointreads

import (
	"strings"
	"testing"
)

func TestValidRev(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"HEAD", "main", "refs/heads/main", "publish/site/1700000000", "abcd",
		"0123456789abcdef0123456789abcdef01234567", "v1.2.3", "feature/x_y-z"} {
		if !validRev(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "-p", "--output=x", "main..HEAD", "HEAD~1", "HEAD^", "HEAD@{1}", "main:file",
		"refs/heads/../x", "a b", "a\nb", "refs//heads", "refs/.hidden", "x.lock", "x/", "x.", "@", "*", "a\x00b",
		strings.Repeat("a", 300)} {
		if validRev(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range []string{"abc", "ABCD", "zzzz", strings.Repeat("a", 41), "-abc"} {
		if validSHA(bad) {
			t.Errorf("sha %q accepted", bad)
		}
	}
}

// FuzzValidRev: nothing accepted can be read by git as an option, a range,
// revision arithmetic or a path.
func FuzzValidRev(f *testing.F) {
	for _, s := range []string{"HEAD", "main..x", "--output=x", "publish/a/1", "HEAD~1", "a@{1}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !validRev(s) {
			return
		}
		if strings.HasPrefix(s, "-") || strings.Contains(s, "..") || strings.ContainsAny(s, " \t\n\r\x00~^:?*[\\@{}") ||
			strings.HasPrefix(s, "/") || len(s) > 255 {
			t.Fatalf("accepted %q", s)
		}
	})
}
