package catalog_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"svc-2-0", "svc-2.0", "svc-1-0"} {
		if _, ok := c.Resolve(name); !ok {
			t.Errorf("%s does not resolve", name)
		}
	}
	if m, _ := c.Resolve("svc-2.0"); m.ID != "svc-2-0" || m.ReasoningEffort == "" {
		t.Errorf("alias resolves to %+v", m)
	}
	if m, _ := c.Resolve("svc-1-0"); !m.Legacy {
		t.Error("svc-1-0 is the legacy model")
	}
	if !c.HasDevProvider() {
		t.Error("the built-in default is the dev provider")
	}
	free, ok := c.Plan("free")
	if !ok || !free.AllowsTier("standard") || free.AllowsTier("premium") || len(free.Windows) != 2 {
		t.Errorf("free plan %+v", free)
	}
}

func TestUpstreamOverride(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(catalog.Options{UpstreamBaseURL: "http://127.0.0.1:9/v1", UpstreamAPIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Providers["main"]
	if p.Type != "openai" || p.BaseURL != "http://127.0.0.1:9/v1" || p.APIKey != "k" || c.HasDevProvider() {
		t.Fatalf("provider %+v", p)
	}
}

func TestCredits(t *testing.T) {
	t.Parallel()
	m := catalog.Model{Price: catalog.Price{InputPerMTok: 3, OutputPerMTok: 15}}
	if got := m.CreditsMicro(1000, 100); got != 4500 {
		t.Fatalf("1000 in + 100 out at 3/15 per Mtok = %d micro-credits, want 4500", got)
	}
	if w := (catalog.Window{Credits: 0.5}); w.LimitMicro() != 500000 {
		t.Fatalf("LimitMicro = %d", w.LimitMicro())
	}
}

func TestBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]string{
		"unknown field":    "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: a, colour: red}]",
		"unknown provider": "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: b}]",
		"duplicate alias":  "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: a}, {id: n, aliases: [m], tier: t, provider: a}]",
		"bad type":         "providers: [{name: a, type: grpc}]\nmodels: [{id: m, tier: t, provider: a}]",
		"no base url":      "providers: [{name: a, type: openai}]\nmodels: [{id: m, tier: t, provider: a}]",
		"no tier":          "providers: [{name: a, type: dev}]\nmodels: [{id: m, provider: a}]",
	}
	for name, body := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := catalog.Load(catalog.Options{ModelsFile: path}); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := catalog.Load(catalog.Options{PlansFile: filepath.Join(dir, "missing.yaml")}); err == nil {
		t.Error("a missing plans file loaded")
	}
}

func writeModels(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The additive form: deployments in order and key pools from env, _FILE and
// file; the old single-provider form still loads as one deployment.
func TestDeploymentsAndKeyPools(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k3")
	if err := os.WriteFile(keyFile, []byte("value-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "k2")
	if err := os.WriteFile(envFile, []byte("value-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAT_TEST_K1", "value-1")
	t.Setenv("CAT_TEST_K2_FILE", envFile)
	path := writeModels(t, `providers:
  - {name: a, type: openai, base_url: "http://a/v1", api_keys: [{name: one, env: CAT_TEST_K1, weight: 3},
     {name: two, env: CAT_TEST_K2}, {name: three, file: `+keyFile+`}]}
  - {name: b, type: openai, base_url: "http://b/v1", api_key_env: CAT_TEST_K1}
models:
  - {id: m, tier: t, created: 1700000000, deployments: [{provider: a, upstream_model: up-a}, {provider: b, upstream_model: up-b}]}
  - {id: old, tier: t, created: 2025-01-31, provider: b, upstream_model: up-old}
  - {id: quoted, tier: t, created: "2025-01-31", provider: b, upstream_model: up-old}
`)
	c, err := catalog.Load(catalog.Options{ModelsFile: path})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.Resolve("m")
	if len(m.Deployments) != 2 || m.Deployments[0].Name() != "a/up-a" || m.Deployments[1].Name() != "b/up-b" || m.Created != 1700000000 {
		t.Fatalf("model m: %+v", m)
	}
	old, _ := c.Resolve("old")
	if len(old.Deployments) != 1 || old.Deployments[0].Name() != "b/up-old" || old.Created != 1738281600 {
		t.Fatalf("model old: %+v", old)
	}
	if quoted, _ := c.Resolve("quoted"); quoted.Created != 1738281600 { // as Helm renders a date
		t.Fatalf("model quoted: %+v", quoted)
	}
	keys := c.Providers["a"].Keys()
	got := []string{}
	for _, k := range keys {
		got = append(got, k.Name+"="+k.Value+"/"+strconv.Itoa(k.Weight))
	}
	if strings.Join(got, ",") != "one=value-1/3,two=value-2/1,three=value-3/1" {
		t.Fatalf("pool a: %v", got)
	}
	if k := c.Providers["b"].Keys(); len(k) != 1 || k[0].Name != "default" || k[0].Value != "value-1" {
		t.Fatalf("single key of b: %+v", k)
	}
}

func TestBadDeploymentsAndKeys(t *testing.T) {
	t.Setenv("CAT_TEST_SET", "v")
	cases := map[string]string{
		"both forms":      "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: a, deployments: [{provider: a}]}]",
		"unknown dep":     "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, deployments: [{provider: a}, {provider: z}]}]",
		"dup deployment":  "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, deployments: [{provider: a, upstream_model: x}, {provider: a, upstream_model: x}]}]",
		"key no value":    "providers: [{name: a, type: dev, api_keys: [{name: k, env: CAT_TEST_UNSET_XYZ}]}]\nmodels: [{id: m, tier: t, provider: a}]",
		"key no name":     "providers: [{name: a, type: dev, api_keys: [{env: CAT_TEST_SET}]}]\nmodels: [{id: m, tier: t, provider: a}]",
		"dup key name":    "providers: [{name: a, type: dev, api_keys: [{name: k, env: CAT_TEST_SET}, {name: k, env: CAT_TEST_SET}]}]\nmodels: [{id: m, tier: t, provider: a}]",
		"negative weight": "providers: [{name: a, type: dev, api_keys: [{name: k, env: CAT_TEST_SET, weight: -1}]}]\nmodels: [{id: m, tier: t, provider: a}]",
		"env and file":    "providers: [{name: a, type: dev, api_keys: [{name: k, env: CAT_TEST_SET, file: /x}]}]\nmodels: [{id: m, tier: t, provider: a}]",
		"dup provider":    "providers: [{name: a, type: dev}, {name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: a}]",
		"bad created":     "providers: [{name: a, type: dev}]\nmodels: [{id: m, tier: t, provider: a, created: soon}]",
	}
	for name, body := range cases {
		if _, err := catalog.Load(catalog.Options{ModelsFile: writeModels(t, body)}); err == nil {
			t.Errorf("%s: loaded", name)
		} else if strings.Contains(err.Error(), "CAT_TEST_SET=") || strings.Contains(err.Error(), `"v"`) {
			t.Errorf("%s: the error shows a key value: %v", name, err)
		}
	}
}

// TestCreditsMicroCached: cached and cache-write tokens are part of the
// prompt tokens and priced at their own rates, or at the input rate when
// the models file sets none.
func TestCreditsMicroCached(t *testing.T) {
	t.Parallel()
	cachedPrice, writePrice := 0.3, 3.75
	priced := catalog.Model{Price: catalog.Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: &cachedPrice, CacheWritePerMTok: &writePrice}}
	plain := catalog.Model{Price: catalog.Price{InputPerMTok: 3, OutputPerMTok: 15}}
	for _, tc := range []struct {
		name                               string
		m                                  catalog.Model
		prompt, cached, written, out, want int64
	}{
		{"no cache", priced, 1000, 0, 0, 10, 3150},
		{"cached and written", priced, 1000, 800, 100, 10, 100*3 + 240 + 375 + 150},
		{"no cache prices: input price", plain, 1000, 800, 100, 10, 3150},
		{"inconsistent counts never go negative", priced, 10, 800, 0, 0, 240},
	} {
		if got := tc.m.CreditsMicroCached(tc.prompt, tc.cached, tc.written, tc.out); got != tc.want {
			t.Errorf("%s: %d micro-credits, want %d", tc.name, got, tc.want)
		}
	}
	if plain.CreditsMicro(1000, 10) != 3150 {
		t.Error("CreditsMicro changed")
	}
}

// The built-in models file's aliases resolve to their models, the legacy
// one (svc-1.0) included, with the legacy model's own upstream and price.
func TestBuiltInAliasesResolve(t *testing.T) {
	t.Parallel()
	c, err := catalog.Load(catalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		alias, id, upstream string
		legacy              bool
		inPrice             float64
	}{
		{"svc-1.0", "svc-1-0", "gpt-4.1-mini", true, 1},
		{"svc-2.0", "svc-2-0", "gpt-5-mini", false, 3},
	} {
		m, ok := c.Resolve(tc.alias)
		if !ok || m.ID != tc.id || m.Legacy != tc.legacy || len(m.Deployments) != 1 ||
			m.Deployments[0].UpstreamModel != tc.upstream || m.Price.InputPerMTok != tc.inPrice {
			t.Errorf("%s resolves to %+v (ok %v), want %s (legacy %v) on %s", tc.alias, m, ok, tc.id, tc.legacy, tc.upstream)
		}
	}
}
