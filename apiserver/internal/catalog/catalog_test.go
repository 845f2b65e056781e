package catalog_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

func TestDefaults(t *testing.T) {
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
	m := catalog.Model{Price: catalog.Price{InputPerMTok: 3, OutputPerMTok: 15}}
	if got := m.CreditsMicro(1000, 100); got != 4500 {
		t.Fatalf("1000 in + 100 out at 3/15 per Mtok = %d micro-credits, want 4500", got)
	}
	if w := (catalog.Window{Credits: 0.5}); w.LimitMicro() != 500000 {
		t.Fatalf("LimitMicro = %d", w.LimitMicro())
	}
}

func TestBadFiles(t *testing.T) {
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
