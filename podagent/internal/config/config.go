// Package config declares every podagent setting once: its flag, its
// environment variable (docs/design.md §5), its default, and whether it is a
// secret (secrets also accept <VAR>_FILE, for Kubernetes-mounted files).
// A flag given on the command line wins over the environment.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/podagent/internal/webhook"
	"github.com/svc-dev/svc/shared/datadir"
	"github.com/svc-dev/svc/shared/logging"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/wire"
)

// DefaultLargeFileBytes is LARGE_FILE_BYTES when unset (spec 8: 5 MB).
const DefaultLargeFileBytes = 5 << 20

// Config is the pod's settings.
type Config struct {
	// Foreign are the variables of the environment that belong to another
	// program of the service (the API server's, say), accepted and ignored;
	// logged at debug once the logger exists.
	Foreign []settings.Foreign

	ProjectID    string
	Mode         syncmode.Mode
	APIURL       string
	RuntimeToken string
	DataDir      string
	// Store is SVC_STORAGE and SVC_S3_* (ObjectStore adds its fs Dir).
	Store          objstore.Config
	WorkspaceDir   string
	LargeFileBytes int64
	// DurableFull: every persist writes the whole base (no increments).
	DurableFull bool
	// DurableMaxIncrements listed before a background compaction.
	DurableMaxIncrements int
	// DurableRetireGrace: how long an increment no manifest lists is kept
	// before the owner removes it.
	DurableRetireGrace   time.Duration
	DegradeAfterFailures int
	HTTPAddr             string
	// HTTPListenFD, when positive, is an inherited listening socket the pod
	// serves on instead of opening HTTPAddr (the local runtime driver opens
	// it on port 0 and hands it over, so no two pods race for a port).
	HTTPListenFD    int
	PprofAddr       string
	Log             logging.Options
	PersistRetryMin time.Duration
	PersistRetryMax time.Duration
	// ShutdownGrace is the time between SIGTERM and SIGKILL that the
	// runtime gives the pod (the local driver's stop grace, the pod's
	// terminationGracePeriodSeconds): the drain gets what is left after the
	// git and S3 flushes of spec 10.2.
	ShutdownGrace time.Duration
	LFS           bool
	// Generation is the runtime driver's generation of this pod
	// (SVC_POD_GENERATION; 0: none): the pod never claims its project over
	// a pod of a newer generation (docs/sync-modes.md §11).
	Generation int64
	// Unassigned starts the pod as a warm pool's spare (SVC_POD_UNASSIGNED):
	// no project until the API claims it (docs/scale.md); RuntimeToken is
	// then the pod's bootstrap token, and Assign gives the project.
	Unassigned bool
	// Webhook is the webhook channel's settings (flag or env).
	Webhook webhook.Settings
}

// ObjectStore is the objstore.Open config of the pod: the fs backend's root
// is the data dir's store, the directory the API server's fs store uses.
func (c *Config) ObjectStore() objstore.Config {
	sc := c.Store
	sc.Dir = datadir.Store(c.DataDir)
	return sc
}

var options = slices.Concat([]settings.Option[Config]{
	{Flag: "project-id", Env: "SVC_PROJECT_ID", Usage: "project this pod serves (required)", Set: settings.String(func(c *Config) *string { return &c.ProjectID })},
	{Flag: "cloud-sync-mode", Env: syncmode.EnvVar, Def: string(syncmode.Default), Usage: "s3, dual_shadow or git_only", Set: func(c *Config, v string) (err error) { c.Mode, err = syncmode.Parse(v); return }},
	{Flag: "api-url", Env: "SVC_API_URL", Usage: "API base URL for /internal calls (checkpoint records)", Set: settings.String(func(c *Config) *string { return &c.APIURL })},
	{Flag: "runtime-token", Env: "SVC_RUNTIME_TOKEN", Secret: true, Usage: "this project's runtime token (required)", Set: settings.String(func(c *Config) *string { return &c.RuntimeToken })},
	{Flag: "data-dir", Env: "SVC_DATA_DIR", Def: "./.data", Usage: "data directory (the fs object store lives in <data-dir>/store)", Set: settings.String(func(c *Config) *string { return &c.DataDir })},
	{Flag: "workspace-dir", Env: "SVC_WORKSPACE_DIR", Def: "./workspace", Usage: "the project's work tree (the pod owns it and its .git)", Set: settings.String(func(c *Config) *string { return &c.WorkspaceDir })},
	{Flag: "large-file-bytes", Env: "LARGE_FILE_BYTES", Def: strconv.Itoa(DefaultLargeFileBytes), Usage: "files above this size are tracked as large files", Set: settings.Int(func(c *Config) *int64 { return &c.LargeFileBytes })},
	{Flag: "degrade-after-failures", Env: "SVC_DEGRADE_AFTER_FAILURES", Def: "3", Usage: "degradeAfterFailures: consecutive persist failures before degraded", Set: settings.Int(func(c *Config) *int { return &c.DegradeAfterFailures })},
	{Flag: "http-addr", Env: "SVC_HTTP_ADDR", Def: "127.0.0.1:8081", Usage: "listen address", Set: settings.String(func(c *Config) *string { return &c.HTTPAddr })},
	{Flag: "http-listen-fd", Env: "SVC_HTTP_LISTEN_FD", Def: "0", Usage: "serve on this inherited listening socket instead of http-addr (set by the local runtime driver)", Set: settings.Int(func(c *Config) *int { return &c.HTTPListenFD })},
	{Flag: "pprof-addr", Env: "SVC_PPROF_ADDR", Usage: "serve net/http/pprof on this address (off when empty; keep it on loopback)", Set: settings.String(func(c *Config) *string { return &c.PprofAddr })},
	{Flag: "persist-retry-min", Env: "SVC_PERSIST_RETRY_MIN", Def: "1s", Usage: "first backoff of background persist/record retries", Set: settings.Duration(func(c *Config) *time.Duration { return &c.PersistRetryMin })},
	{Flag: "persist-retry-max", Env: "SVC_PERSIST_RETRY_MAX", Def: "60s", Usage: "cap of background persist/record retry backoff", Set: settings.Duration(func(c *Config) *time.Duration { return &c.PersistRetryMax })},
	{Flag: "shutdown-grace", Env: "SVC_SHUTDOWN_GRACE", Def: "30s", Usage: "time from SIGTERM to SIGKILL the runtime grants; the drain gets what the final git flush (5 s), HEAD snapshot (5 s), S3 flush (10 s) and a 1 s margin leave", Set: settings.Duration(func(c *Config) *time.Duration { return &c.ShutdownGrace })},
	{Flag: "durable-full", Env: "SVC_DURABLE_FULL", Def: "false", Usage: "write the whole repo.git.tar.gz at every persist instead of increments (before a downgrade: docs/sync-modes.md)", Set: settings.Bool(func(c *Config) *bool { return &c.DurableFull })},
	{Flag: "durable-max-increments", Env: "SVC_DURABLE_MAX_INCREMENTS", Def: "16", Usage: "increments listed before the base is rewritten in the background", Set: settings.Int(func(c *Config) *int { return &c.DurableMaxIncrements })},
	{Flag: "durable-retire-grace", Env: "SVC_DURABLE_RETIRE_GRACE", Def: "15m", Usage: "how long an increment no manifest lists (dropped by a compaction, or left by a crash) is kept for readers before the owner removes it", Set: settings.Duration(func(c *Config) *time.Duration { return &c.DurableRetireGrace })},
	{Flag: "pod-generation", Env: "SVC_POD_GENERATION", Def: "0", Usage: "the runtime driver's generation of this pod; a pod never takes its project over from a newer generation", Set: settings.Int(func(c *Config) *int64 { return &c.Generation })},
	{Flag: "unassigned", Env: "SVC_POD_UNASSIGNED", Def: "false", Usage: "start as a warm pool's spare pod: no project until the API claims it (SVC_RUNTIME_TOKEN is then the pod's bootstrap token; set by the kubernetes runtime driver)", Set: settings.Bool(func(c *Config) *bool { return &c.Unassigned })},
	{Flag: "lfs", Env: "SVC_LFS", Def: "true", Usage: "track files above LARGE_FILE_BYTES and curated binary types with git-lfs through the API's batch endpoint", Set: settings.Bool(func(c *Config) *bool { return &c.LFS })},
},
	settings.LogOptions(func(c *Config) *logging.Options { return &c.Log }),
	settings.StorageOptions(func(c *Config) *objstore.Config { return &c.Store }),
	webhook.SettingsOptions(func(c *Config) *webhook.Settings { return &c.Webhook }))

// Parse reads flags from args, then fills everything not given on the
// command line from getenv (or <VAR>_FILE for secrets), then defaults.
func Parse(name string, args []string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &Config{}
	if _, err := settings.Parse(c, name, args, getenv, options); err != nil {
		return nil, err
	}
	return c, c.validate()
}

// EnvNames are the variables of the pod's settings.
func EnvNames() []string { return settings.EnvNames(options) }

// CheckEnviron refuses the SVC_ variables of environ that no program of the
// service reads and returns those of another program, to be logged
// (settings.CheckEnviron); extra are the caller's own settings (paired
// mode's).
func CheckEnviron(environ []string, extra ...string) ([]settings.Foreign, error) {
	return settings.CheckEnviron(environ, append(EnvNames(), extra...))
}

// Assign is c with the project of a spare pod's claim (wire.PodClaim): the
// configuration a pod created for that project would have had, validated as
// such.
func (c *Config) Assign(cl wire.PodClaim) (*Config, error) {
	if !c.Unassigned {
		return nil, errors.New("the pod already serves a project")
	}
	a := *c
	a.Unassigned = false
	a.ProjectID, a.Generation, a.RuntimeToken = cl.ProjectID, cl.Generation, cl.RuntimeToken
	mode, err := syncmode.Parse(cl.SyncMode)
	if err != nil {
		return nil, err
	}
	a.Mode = mode
	if a.Generation <= 0 {
		return nil, errors.New("a claim needs the pod's generation")
	}
	return &a, a.validate()
}

func (c *Config) validate() error {
	var errs []error
	if c.Unassigned {
		// A spare pod: only its bootstrap token and its storage now; the
		// project, the mode and the token come with the claim.
		if c.ProjectID != "" {
			errs = append(errs, errors.New("SVC_POD_UNASSIGNED pods take their project from the claim: SVC_PROJECT_ID must be empty"))
		}
		if c.RuntimeToken == "" {
			errs = append(errs, errors.New("SVC_POD_UNASSIGNED needs the pod's bootstrap token in SVC_RUNTIME_TOKEN (or SVC_RUNTIME_TOKEN_FILE)"))
		}
		if err := c.Store.Validate(); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if c.ProjectID == "" {
		errs = append(errs, errors.New("SVC_PROJECT_ID is required"))
	} else if strings.ContainsAny(c.ProjectID, "/\\\x00") || c.ProjectID == "." || c.ProjectID == ".." {
		errs = append(errs, fmt.Errorf("SVC_PROJECT_ID %q is not a valid project id", c.ProjectID))
	}
	if c.RuntimeToken == "" {
		errs = append(errs, errors.New("SVC_RUNTIME_TOKEN (or SVC_RUNTIME_TOKEN_FILE) is required"))
	}
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.LargeFileBytes <= 0 {
		errs = append(errs, errors.New("LARGE_FILE_BYTES must be positive"))
	}
	if c.DegradeAfterFailures <= 0 {
		errs = append(errs, errors.New("SVC_DEGRADE_AFTER_FAILURES must be positive"))
	}
	if c.Mode.PushesToAPI() && c.APIURL == "" {
		errs = append(errs, fmt.Errorf("%s=%s needs SVC_API_URL: the pod pushes each turn to the API's git endpoint", syncmode.EnvVar, c.Mode))
	}
	return errors.Join(errs...)
}

// Help lists every setting of the pod with its flag, variable and default
// (the settings part of `podagent serve -h` and `podagent help serve`).
func Help() string { return settings.Help(options) }
