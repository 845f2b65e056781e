// Package catalog loads the models file and the plans file (docs/design.md §5,
// spec 2.1, 8 and 9): which public model ids and aliases exist, which
// upstream provider and model back each, their tier and price, and what each
// plan allows (tiers, requests per minute, usage windows in credits).
// A default of each file ships in the binary.
package catalog

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

//go:embed default_models.yaml
var defaultModels []byte

//go:embed default_plans.yaml
var defaultPlans []byte

// Provider is an upstream: an OpenAI-compatible base URL, or the built-in dev
// provider (clearly labelled, deterministic, no network).
// A provider holds one API key (api_key_env) or a pool of named keys
// (api_keys) that the gateway uses in turn (see docs/gateway.md).
type Provider struct {
	Name      string   `yaml:"name"`
	Type      string   `yaml:"type"` // openai | dev
	BaseURL   string   `yaml:"base_url"`
	APIKeyEnv string   `yaml:"api_key_env"`
	APIKey    string   `yaml:"-"` // resolved from APIKeyEnv at load
	APIKeys   []APIKey `yaml:"api_keys"`
	// ResponsesNative: the provider serves the OpenAI Responses API at
	// <base_url>/responses; Responses requests for a model whose every
	// deployment is on such a provider are passed through untouched
	// instead of translated to chat completions.
	ResponsesNative bool `yaml:"responses_native"`
}

// APIKey is one key of a provider's pool. Its value comes from the
// environment variable Env (or the file named by Env+"_FILE") or from File;
// only Name ever appears in metrics and logs.
type APIKey struct {
	Name   string `yaml:"name"`
	Env    string `yaml:"env"`
	File   string `yaml:"file"`
	Weight int    `yaml:"weight"` // default 1; keys are used in proportion
	Value  string `yaml:"-"`
}

// Keys is the provider's key pool after load: the api_keys entries, or one
// key named "default" from api_key_env (none when that is empty).
func (p Provider) Keys() []APIKey {
	if len(p.APIKeys) > 0 {
		return p.APIKeys
	}
	if p.APIKey == "" {
		return nil
	}
	return []APIKey{{Name: "default", Value: p.APIKey, Weight: 1}}
}

// Deployment is one provider and upstream model that can serve a public
// model. A model's deployments are tried in order (fallbacks).
type Deployment struct {
	Provider      string `yaml:"provider"`
	UpstreamModel string `yaml:"upstream_model"`
}

// Name identifies the deployment in metrics, logs and usage records.
func (d Deployment) Name() string { return d.Provider + "/" + d.UpstreamModel }

// Price is per million tokens, in credits.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
	// CachedInputPerMTok prices prompt tokens read from the provider's
	// cache and CacheWritePerMTok those written to it; unset, they cost
	// InputPerMTok (docs/gateway.md).
	CachedInputPerMTok *float64 `yaml:"cached_input_per_mtok"`
	CacheWritePerMTok  *float64 `yaml:"cache_write_per_mtok"`
}

// Model is one public model.
type Model struct {
	ID              string   `yaml:"id"`
	DisplayName     string   `yaml:"display_name"`
	Created         Created  `yaml:"created"` // the models list's created (unix seconds)
	Aliases         []string `yaml:"aliases"`
	Legacy          bool     `yaml:"legacy"`
	Tier            string   `yaml:"tier"`
	Provider        string   `yaml:"provider"`       // single-deployment form
	UpstreamModel   string   `yaml:"upstream_model"` // single-deployment form
	ReasoningEffort string   `yaml:"reasoning_effort"`
	Price           Price    `yaml:"price"`
	// Deployments are tried in order; after load it always holds at least
	// one (the provider/upstream_model form becomes a single deployment).
	Deployments []Deployment `yaml:"deployments"`
}

// Created is a unix time in seconds, written in the models file as a number
// or as a YAML date or timestamp (2025-01-31).
type Created int64

// UnmarshalYAML accepts an integer, a timestamp, or a quoted date.
func (c *Created) UnmarshalYAML(n *yaml.Node) error {
	var i int64
	if err := n.Decode(&i); err == nil {
		*c = Created(i)
		return nil
	}
	var t time.Time
	if err := n.Decode(&t); err == nil {
		*c = Created(t.Unix())
		return nil
	}
	// A quoted date (as Helm renders values) is a string node.
	for _, layout := range []string{time.DateOnly, time.RFC3339} {
		if t, err := time.Parse(layout, n.Value); err == nil {
			*c = Created(t.Unix())
			return nil
		}
	}
	return fmt.Errorf("created: want unix seconds or a date, got %q", n.Value)
}

// CreditsMicro is the cost of a request in millionths of a credit.
func (m Model) CreditsMicro(promptTokens, completionTokens int64) int64 {
	return m.CreditsMicroCached(promptTokens, 0, 0, completionTokens)
}

// CreditsMicroCached is the cost of a request whose prompt tokens include
// cached tokens read from the provider's cache and written ones written to
// it, each at its own price (the input price when the models file sets
// none).
func (m Model) CreditsMicroCached(promptTokens, cached, written, completionTokens int64) int64 {
	p := m.Price
	cachedPrice, writePrice := p.InputPerMTok, p.InputPerMTok
	if p.CachedInputPerMTok != nil {
		cachedPrice = *p.CachedInputPerMTok
	}
	if p.CacheWritePerMTok != nil {
		writePrice = *p.CacheWritePerMTok
	}
	cached, written = max(cached, 0), max(written, 0)
	fresh := max(promptTokens-cached-written, 0)
	return int64(math.Round(float64(fresh)*p.InputPerMTok + float64(cached)*cachedPrice +
		float64(written)*writePrice + float64(completionTokens)*p.OutputPerMTok))
}

// Window is a plan's usage window.
type Window struct {
	Name     string        `yaml:"name"`
	Duration time.Duration `yaml:"duration"`
	Credits  float64       `yaml:"credits"`
}

// LimitMicro is the window's allowance in millionths of a credit.
func (w Window) LimitMicro() int64 { return int64(math.Round(w.Credits * 1e6)) }

// Plan is what a workspace's plan allows.
type Plan struct {
	Name         string   `yaml:"name"`
	Tiers        []string `yaml:"tiers"`
	RPM          int64    `yaml:"rpm"`           // per API key
	WorkspaceRPM int64    `yaml:"workspace_rpm"` // per workspace; 0 means no separate limit
	Windows      []Window `yaml:"windows"`
}

// AllowsTier reports whether the plan includes tier.
func (p Plan) AllowsTier(tier string) bool {
	for _, t := range p.Tiers {
		if t == tier {
			return true
		}
	}
	return false
}

// Catalog is the loaded models and plans.
type Catalog struct {
	Providers map[string]Provider
	Models    []Model // in file order
	byName    map[string]*Model
	Plans     map[string]Plan
}

type modelsFile struct {
	Providers []Provider `yaml:"providers"`
	Models    []Model    `yaml:"models"`
}

type plansFile struct {
	Plans []Plan `yaml:"plans"`
}

// Options override parts of the files from the environment.
type Options struct {
	ModelsFile      string // empty: built-in default
	PlansFile       string // empty: built-in default
	UpstreamBaseURL string // overrides the first provider (type becomes openai)
	UpstreamAPIKey  string
}

// Load reads both files and validates them.
func Load(o Options) (*Catalog, error) {
	mdata, pdata := defaultModels, defaultPlans
	var err error
	if o.ModelsFile != "" {
		if mdata, err = os.ReadFile(o.ModelsFile); err != nil {
			return nil, fmt.Errorf("catalog: models file: %w", err)
		}
	}
	if o.PlansFile != "" {
		if pdata, err = os.ReadFile(o.PlansFile); err != nil {
			return nil, fmt.Errorf("catalog: plans file: %w", err)
		}
	}
	var mf modelsFile
	if err := decodeStrict(mdata, &mf); err != nil {
		return nil, fmt.Errorf("catalog: models file: %w", err)
	}
	var pf plansFile
	if err := decodeStrict(pdata, &pf); err != nil {
		return nil, fmt.Errorf("catalog: plans file: %w", err)
	}
	c := &Catalog{Providers: map[string]Provider{}, byName: map[string]*Model{}, Plans: map[string]Plan{}}
	for i, p := range mf.Providers {
		if i == 0 && o.UpstreamBaseURL != "" {
			p.Type, p.BaseURL = "openai", o.UpstreamBaseURL
			if o.UpstreamAPIKey != "" {
				p.APIKey = o.UpstreamAPIKey
			}
		}
		if p.APIKey == "" && p.APIKeyEnv != "" {
			p.APIKey = os.Getenv(p.APIKeyEnv)
		}
		if i == 0 && o.UpstreamAPIKey != "" {
			p.APIKeys = nil // the override is the provider's only key
		}
		if err := loadKeys(&p); err != nil {
			return nil, err
		}
		if _, dup := c.Providers[p.Name]; dup || p.Name == "" {
			return nil, fmt.Errorf("catalog: provider %q: names must be unique and non-empty", p.Name)
		}
		if p.Type != "openai" && p.Type != "dev" {
			return nil, fmt.Errorf("catalog: provider %q: type must be openai or dev", p.Name)
		}
		if p.Type == "openai" && p.BaseURL == "" {
			return nil, fmt.Errorf("catalog: provider %q: base_url is required", p.Name)
		}
		c.Providers[p.Name] = p
	}
	c.Models = mf.Models
	for i := range c.Models {
		m := &c.Models[i]
		if m.ID == "" || m.Tier == "" {
			return nil, fmt.Errorf("catalog: model #%d: id and tier are required", i+1)
		}
		if err := c.deployments(m); err != nil {
			return nil, err
		}
		for _, name := range append([]string{m.ID}, m.Aliases...) {
			if _, dup := c.byName[name]; dup {
				return nil, fmt.Errorf("catalog: model name %q is defined twice", name)
			}
			c.byName[name] = m
		}
	}
	for _, p := range pf.Plans {
		for _, w := range p.Windows {
			if w.Duration <= 0 || w.Name == "" {
				return nil, fmt.Errorf("catalog: plan %q: window needs a name and a positive duration", p.Name)
			}
		}
		c.Plans[p.Name] = p
	}
	if len(c.Plans) == 0 || len(c.Models) == 0 {
		return nil, errors.New("catalog: at least one model and one plan are required")
	}
	return c, nil
}

// deployments normalises the two forms of a model's upstream: provider +
// upstream_model, or a deployments list (not both).
func (c *Catalog) deployments(m *Model) error {
	if len(m.Deployments) > 0 && (m.Provider != "" || m.UpstreamModel != "") {
		return fmt.Errorf("catalog: model %q: give either provider/upstream_model or deployments, not both", m.ID)
	}
	if len(m.Deployments) == 0 {
		m.Deployments = []Deployment{{Provider: m.Provider, UpstreamModel: m.UpstreamModel}}
	}
	seen := map[string]bool{}
	for i := range m.Deployments {
		d := &m.Deployments[i]
		if _, ok := c.Providers[d.Provider]; !ok {
			return fmt.Errorf("catalog: model %q: unknown provider %q", m.ID, d.Provider)
		}
		if d.UpstreamModel == "" {
			d.UpstreamModel = m.ID
		}
		if seen[d.Name()] {
			return fmt.Errorf("catalog: model %q: deployment %s is listed twice", m.ID, d.Name())
		}
		seen[d.Name()] = true
	}
	// The first deployment is also what the single form's fields report.
	m.Provider, m.UpstreamModel = m.Deployments[0].Provider, m.Deployments[0].UpstreamModel
	return nil
}

// loadKeys reads the values of a provider's key pool. A pool key without a
// value is a start-up error naming it (never the value).
func loadKeys(p *Provider) error {
	names := map[string]bool{}
	for i := range p.APIKeys {
		k := &p.APIKeys[i]
		if k.Name == "" || names[k.Name] {
			return fmt.Errorf("catalog: provider %q: api_keys[%d]: each key needs a unique name", p.Name, i)
		}
		names[k.Name] = true
		if k.Weight < 0 {
			return fmt.Errorf("catalog: provider %q: key %q: weight must not be negative", p.Name, k.Name)
		}
		if k.Weight == 0 {
			k.Weight = 1
		}
		switch {
		case k.Env != "" && k.File != "":
			return fmt.Errorf("catalog: provider %q: key %q: give env or file, not both", p.Name, k.Name)
		case k.Env != "":
			k.Value = os.Getenv(k.Env)
			if f := os.Getenv(k.Env + "_FILE"); k.Value == "" && f != "" {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("catalog: provider %q: key %q: %s_FILE: %w", p.Name, k.Name, k.Env, err)
				}
				k.Value = strings.TrimSpace(string(b))
			}
		case k.File != "":
			b, err := os.ReadFile(k.File)
			if err != nil {
				return fmt.Errorf("catalog: provider %q: key %q: %w", p.Name, k.Name, err)
			}
			k.Value = strings.TrimSpace(string(b))
		}
		if k.Value == "" {
			return fmt.Errorf("catalog: provider %q: key %q has no value (set env %q or file)", p.Name, k.Name, k.Env)
		}
	}
	return nil
}

// ResponsesNative reports whether every deployment of m is on a provider
// declared Responses-native.
func (c *Catalog) ResponsesNative(m *Model) bool {
	for _, d := range m.Deployments {
		if !c.Providers[d.Provider].ResponsesNative {
			return false
		}
	}
	return len(m.Deployments) > 0
}

// Resolve finds a model by id or alias.
func (c *Catalog) Resolve(name string) (Model, bool) {
	m, ok := c.byName[strings.TrimSpace(name)]
	if !ok {
		return Model{}, false
	}
	return *m, true
}

// Plan returns the named plan.
func (c *Catalog) Plan(name string) (Plan, bool) {
	p, ok := c.Plans[name]
	return p, ok
}

// HasDevProvider reports whether any model is served by the dev provider.
func (c *Catalog) HasDevProvider() bool {
	for _, p := range c.Providers {
		if p.Type == "dev" {
			return true
		}
	}
	return false
}

func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	return dec.Decode(v)
}
