// Package catalog loads the models file and the plans file (DESIGN.md §5,
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
type Provider struct {
	Name      string `yaml:"name"`
	Type      string `yaml:"type"` // openai | dev
	BaseURL   string `yaml:"base_url"`
	APIKeyEnv string `yaml:"api_key_env"`
	APIKey    string `yaml:"-"` // resolved from APIKeyEnv at load
}

// Price is per million tokens, in credits.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
}

// Model is one public model.
type Model struct {
	ID              string   `yaml:"id"`
	DisplayName     string   `yaml:"display_name"`
	Aliases         []string `yaml:"aliases"`
	Legacy          bool     `yaml:"legacy"`
	Tier            string   `yaml:"tier"`
	Provider        string   `yaml:"provider"`
	UpstreamModel   string   `yaml:"upstream_model"`
	ReasoningEffort string   `yaml:"reasoning_effort"`
	Price           Price    `yaml:"price"`
}

// CreditsMicro is the cost of a request in millionths of a credit.
func (m Model) CreditsMicro(promptTokens, completionTokens int64) int64 {
	return int64(math.Round(float64(promptTokens)*m.Price.InputPerMTok + float64(completionTokens)*m.Price.OutputPerMTok))
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
		if _, ok := c.Providers[m.Provider]; !ok {
			return nil, fmt.Errorf("catalog: model %q: unknown provider %q", m.ID, m.Provider)
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
