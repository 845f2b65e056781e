package wire

import "testing"

func TestSourceHeadRoundTrip(t *testing.T) {
	t.Parallel()
	sha := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct{ comment, want string }{
		{SourceHeadComment(sha), sha},
		{SourceHeadComment(""), ""},
		{"svc-head=zz23456789abcdef0123456789abcdef01234567", ""},
		{"svc-head=0123", ""},
		{"other", ""},
	} {
		if got := SourceHead(tc.comment); got != tc.want {
			t.Errorf("SourceHead(%q) = %q, want %q", tc.comment, got, tc.want)
		}
	}
}
