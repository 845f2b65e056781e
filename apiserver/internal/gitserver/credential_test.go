package gitserver

import (
	"encoding/base64"
	"net/http"
	"testing"
)

func TestCredential(t *testing.T) {
	t.Parallel()
	basic := func(u, p string) string {
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, p)
		return r.Header.Get("Authorization")
	}
	cases := map[string]string{
		basic("anyone", "svc_sk_x"): "svc_sk_x",
		basic("", "svc_sk_y"):       "svc_sk_y",
		"Bearer svc_sk_z":           "svc_sk_z",
		"bearer svc_sk_z":           "svc_sk_z",
		"Basic " + "not base64!":    "",
		"Basic " + base64.StdEncoding.EncodeToString([]byte("nocolon")): "",
		"":         "",
		"Digest x": "",
	}
	for h, want := range cases {
		if got := credential(h); got != want {
			t.Errorf("credential(%q) = %q, want %q", h, got, want)
		}
	}
}

func FuzzCredential(f *testing.F) {
	f.Add("Basic eDp5")
	f.Add("Bearer abc")
	f.Fuzz(func(t *testing.T, h string) { _ = credential(h) })
}

func TestGitProtocol(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"version=2": true, "version=1": false, "version=2:object-format=sha1": true,
		"version=2 --upload-pack=x": false, "": false, "version=2\nX": false} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set("Git-Protocol", v)
		env, v2 := gitProtocol(r)
		if v2 != want || (!want && env != "" && env != v) {
			t.Errorf("%q: env=%q v2=%v", v, env, v2)
		}
	}
}
