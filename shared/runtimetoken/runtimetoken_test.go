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

// A bootstrap token is per pod and per secret, never a runtime token, and
// only the same pod name under the same secret reproduces it.
func TestBootstrapPerPod(t *testing.T) {
	t.Parallel()
	secret, other := []byte("runtime-auth-secret"), []byte("another-secret")
	a := runtimetoken.Bootstrap(secret, "svc-rt-spare-0-1")
	cases := []struct {
		name string
		got  string
		same bool
	}{
		{"same pod, same secret", runtimetoken.Bootstrap(secret, "svc-rt-spare-0-1"), true},
		{"another pod", runtimetoken.Bootstrap(secret, "svc-rt-spare-1-1"), false},
		{"the next pod of the slot", runtimetoken.Bootstrap(secret, "svc-rt-spare-0-2"), false},
		{"another secret", runtimetoken.Bootstrap(other, "svc-rt-spare-0-1"), false},
		{"a runtime token", runtimetoken.Mint(secret, "svc-rt-spare-0-1"), false},
	}
	for _, c := range cases {
		if got := runtimetoken.Equal(a, c.got); got != c.same {
			t.Errorf("%s: Equal = %v, want %v", c.name, got, c.same)
		}
	}
	if !strings.HasPrefix(a, runtimetoken.BootstrapPrefix) {
		t.Errorf("bootstrap token %q lacks %q", a, runtimetoken.BootstrapPrefix)
	}
	if _, err := runtimetoken.Verify(secret, a); err == nil {
		t.Error("a bootstrap token verified as a runtime token")
	}
}
