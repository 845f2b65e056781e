package runtimetoken_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/runtimetoken"
)

func TestMintVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	tok := runtimetoken.Mint(secret, "prj_a")
	if !strings.HasPrefix(tok, runtimetoken.Prefix) {
		t.Fatalf("token %q lacks the prefix", tok)
	}
	if pid, err := runtimetoken.Verify(secret, tok); err != nil || pid != "prj_a" {
		t.Fatalf("Verify = %q, %v", pid, err)
	}
	bad := []struct{ name, secret, token string }{
		{"other secret", "other", tok},
		{"empty secret", "", tok},
		{"tampered project", "s3cret", strings.Replace(tok, "prj_a", "prj_b", 1)},
		{"api key", "s3cret", "svc_sk_abc_def"},
		{"no signature", "s3cret", runtimetoken.Prefix + "prj_a"},
		{"empty", "s3cret", ""},
	}
	for _, tc := range bad {
		if _, err := runtimetoken.Verify([]byte(tc.secret), tc.token); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if !runtimetoken.Equal(tok, tok) || runtimetoken.Equal(tok, tok+"x") || runtimetoken.Equal("", "") {
		t.Error("Equal is wrong")
	}
}
