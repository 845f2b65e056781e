package apikey_test

import (
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
)

func TestNewParseMatches(t *testing.T) {
	t.Parallel()
	k := apikey.New()
	id, secret, ok := apikey.Parse(k.Plain)
	if !ok || id != k.ID || !apikey.Matches(secret, k.Hash) {
		t.Fatalf("round trip failed: %v %q %q", ok, id, k.ID)
	}
	if strings.Contains(k.Hash, secret) || !strings.HasPrefix(k.Plain, k.Display) {
		t.Fatal("the hash must not contain the secret; the display prefix starts the key")
	}
	if apikey.Matches(secret+"x", k.Hash) {
		t.Fatal("a different secret matched")
	}
	if k2 := apikey.New(); k2.Plain == k.Plain || k2.ID == k.ID {
		t.Fatal("keys repeat")
	}
}

func TestParseRefusesOtherShapes(t *testing.T) {
	t.Parallel()
	valid := apikey.New().Plain
	for _, s := range []string{
		"", "svc_sk_", "sk-abc", "svc_rt_prj_x.sig", valid + "a", valid[:len(valid)-1],
		strings.Replace(valid, "_", "-", 2), strings.ToUpper(valid), "svc_sk_" + strings.Repeat("a", 12) + "_" + strings.Repeat("!", 40),
	} {
		if _, _, ok := apikey.Parse(s); ok {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(apikey.New().Plain)
	f.Add("svc_sk_")
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := apikey.Parse(s)
		if ok && (!strings.HasPrefix(id, "key_") || s != apikey.Prefix+strings.TrimPrefix(id, "key_")+"_"+secret) {
			t.Fatalf("Parse(%q) = %q %q", s, id, secret)
		}
	})
}
