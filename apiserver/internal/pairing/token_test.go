package pairing

import (
	"strings"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	t.Parallel()
	tok := NewToken()
	if !strings.HasPrefix(tok.Plain, TokenPrefix) || !strings.HasPrefix(tok.ID, "pair_") || !strings.HasPrefix(tok.Plain, tok.Display) {
		t.Fatalf("token %+v", tok)
	}
	id, secret, ok := ParseToken(tok.Plain)
	if !ok || id != tok.ID || !matches(secret, tok.Hash) {
		t.Fatalf("parse %q: %q %v", tok.Plain, id, ok)
	}
	if matches(secret+"x", tok.Hash) || matches(strings.ToUpper(secret), tok.Hash) {
		t.Fatal("a different secret matches")
	}
	for _, bad := range []string{"", tok.Display, tok.Plain + "a", strings.Replace(tok.Plain, "svc_pt_", "svc_sk_", 1),
		"svc_rt_prj_1.abc", strings.ToUpper(tok.Plain[:len(TokenPrefix)]) + tok.Plain[len(TokenPrefix):],
		tok.Plain[:len(TokenPrefix)+12] + "-" + tok.Plain[len(TokenPrefix)+13:]} {
		if _, _, ok := ParseToken(bad); ok {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add(NewToken().Plain)
	f.Add("svc_pt_")
	f.Add("svc_pt_aaaaaaaaaaaa_" + strings.Repeat("b", 40))
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := ParseToken(s)
		if ok && (!strings.HasPrefix(id, "pair_") || len(secret) != 40 || s != TokenPrefix+id[len("pair_"):]+"_"+secret) {
			t.Fatalf("%q → %q %q", s, id, secret)
		}
	})
}
