package login_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/console/login"
)

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h, err := login.HashPassword("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not an argon2id PHC string with the expected parameters", h)
	}
	h2, _ := login.HashPassword("correct horse battery")
	if h == h2 {
		t.Fatal("two hashes of one password are equal (no salt)")
	}
	cases := []struct {
		name, password, hash string
		ok, err              bool
	}{
		{"right", "correct horse battery", h, true, false},
		{"wrong", "correct horse batterz", h, false, false},
		{"empty", "", h, false, false},
		{"too long", strings.Repeat("a", login.MaxPasswordLen+1), h, false, false},
		{"not phc", "x", "plain", false, true},
		{"other algorithm", "x", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA", false, true},
		{"absurd memory", "x", "$argon2id$v=19$m=99999999,t=2,p=1$c2FsdA$aGFzaA", false, true},
		{"bad salt", "x", "$argon2id$v=19$m=19456,t=2,p=1$!!$aGFzaA", false, true},
	}
	for _, c := range cases {
		ok, err := login.VerifyPassword(c.password, c.hash)
		if ok != c.ok || (err != nil) != c.err {
			t.Errorf("%s: ok=%v err=%v, want ok=%v err=%v", c.name, ok, err, c.ok, c.err)
		}
	}
}

func TestValidatePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p  string
		ok bool
	}{{"short", false}, {"ten chars!", true}, {strings.Repeat("x", login.MaxPasswordLen+1), false}} {
		if err := login.ValidatePassword(c.p); (err == nil) != c.ok {
			t.Errorf("%q: %v", c.p, err)
		}
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	a, b := login.RandomToken(), login.RandomToken()
	if len(a) != 43 || a == b {
		t.Fatalf("tokens %q %q", a, b)
	}
	h1, h2 := login.TokenHash(a), login.TokenHash(a)
	if h1 == a || len(h1) != 64 || h1 != h2 || h1 == login.TokenHash(b) {
		t.Fatal("token hash is not a stable SHA-256 hex")
	}
}
