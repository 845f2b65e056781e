package auth

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
)

// secretMatches says what apikey.Matches says.
func TestSecretMatchesAgreesWithApikey(t *testing.T) {
	k := apikey.New()
	_, secret, ok := apikey.Parse(k.Plain)
	if !ok {
		t.Fatalf("a new key does not parse: %q", k.Plain)
	}
	hash := apikey.Hash(secret)
	cases := []struct{ secret, hash string }{
		{secret, hash},
		{secret, strings.ToUpper(hash)},
		{secret + "x", hash},
		{"", hash},
		{"", apikey.Hash("")},
		{secret, hash[:len(hash)-1]},
		{secret, ""},
		{secret, hash[:len(hash)-1] + "0"},
	}
	for _, tc := range cases {
		if got, want := secretMatches(tc.secret, tc.hash), apikey.Matches(tc.secret, tc.hash); got != want {
			t.Errorf("secretMatches(%q, %q) = %v, apikey.Matches %v", tc.secret, tc.hash, got, want)
		}
	}
	if !secretMatches(secret, hash) {
		t.Error("the key's own secret does not match its hash")
	}
	if n := testing.AllocsPerRun(100, func() { secretMatches(secret, hash) }); n != 0 {
		t.Errorf("%v allocations per check", n)
	}
}
