// Package config declares every podagent setting once: its flag, its
// environment variable (docs/design.md §5), its default, and whether it is a
// secret (secrets also accept <VAR>_FILE, for Kubernetes-mounted files).
// A flag given on the command line wins over the environment.
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/syncmode"
)

// DefaultLargeFileBytes is LARGE_FILE_BYTES when unset (spec 8: 5 MB).
const DefaultLargeFileBytes = 5 << 20

// Config is the pod's settings.
type Config struct {
	ProjectID            string
	Mode                 syncmode.Mode
	APIURL               string
	RuntimeToken         string
	Storage              string // fs or s3
	DataDir              string
	S3Endpoint           string
	S3Bucket             string
	S3AccessKey          string
	S3SecretKey          string
	S3UseSSL             bool
	WorkspaceDir         string
	LargeFileBytes       int64
	DegradeAfterFailures int
	HTTPAddr             string
	PprofAddr            string
	LogLevel             string
	PersistRetryMin      time.Duration
	PersistRetryMax      time.Duration
	// ShutdownGrace is the time between SIGTERM and SIGKILL that the
	// runtime gives the pod (the local driver's stop grace, the pod's
	// terminationGracePeriodSeconds): the drain gets what is left after the
	// git and S3 flushes of spec 10.2 (issue 8, item 7).
	ShutdownGrace time.Duration
	LFS           bool
	// Channel holds the webhook channel's settings (flag or env), read by
	// webhook.SettingsFromEnv through ChannelSetting.
	Channel map[string]string
}

// ChannelSetting returns the webhook channel setting named by its env var.
func (c *Config) ChannelSetting(env string) string { return c.Channel[env] }

// channelOptions are the webhook channel's settings: declared here so each
// has a flag, parsed and defaulted by package webhook.
var channelOptions = []struct{ flag, env, usage string }{
	{"webhook-sync-timeout", "SVC_WEBHOOK_SYNC_TIMEOUT", "sync reply timeout (default 120s, spec 8)"},
	{"webhook-max-body-bytes", "SVC_WEBHOOK_MAX_BODY_BYTES", "webhook request body limit (default 1048576)"},
	{"webhook-turn-timeout", "SVC_WEBHOOK_TURN_TIMEOUT", "bound of one agent turn (default 15m)"},
	{"channel-config-ttl", "SVC_CHANNEL_CONFIG_TTL", "cache of the channel config (default 1s)"},
	{"callback-allowed-nets", "SVC_CALLBACK_ALLOWED_NETS", "CIDRs callbacks may reach despite the SSRF guard"},
	{"callback-max-attempts", "SVC_CALLBACK_MAX_ATTEMPTS", "tries per callback (default 8)"},
	{"callback-retry-base", "SVC_CALLBACK_RETRY_BASE", "first callback backoff (default 1s)"},
	{"callback-retry-max", "SVC_CALLBACK_RETRY_MAX", "callback backoff cap (default 2m)"},
	{"callback-timeout", "SVC_CALLBACK_TIMEOUT", "one callback POST (default 30s)"},
	{"callback-forward-url", "SVC_CALLBACK_FORWARD_URL", "send callbacks through this host forwarder (micro-VM guests; set by guest mode)"},
	{"agent-model", "SVC_AGENT_MODEL", "model id of the tool loop (default svc-2-0)"},
	{"agent-max-iterations", "SVC_AGENT_MAX_ITERATIONS", "model calls per turn (default 20)"},
}

func init() {
	for _, co := range channelOptions {
		env := co.env
		options = append(options, option{flag: co.flag, env: env, usage: co.usage,
			set: func(c *Config, v string) error {
				if c.Channel == nil {
					c.Channel = map[string]string{}
				}
				c.Channel[env] = v
				return nil
			}})
	}
}

// FSStoreDir is the root of the fs object store under the data dir; the
// API server's fs store must use the same directory.
func (c *Config) FSStoreDir() string { return filepath.Join(c.DataDir, "store") }

type option struct {
	flag, env, def, usage string
	secret                bool
	set                   func(c *Config, v string) error
}

func str(p func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func dur(p func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) (err error) { *p(c), err = time.ParseDuration(v); return }
}

var options = []option{
	{flag: "project-id", env: "SVC_PROJECT_ID", usage: "project this pod serves (required)", set: str(func(c *Config) *string { return &c.ProjectID })},
	{flag: "cloud-sync-mode", env: syncmode.EnvVar, def: string(syncmode.Default), usage: "s3, dual_shadow or git_only", set: func(c *Config, v string) (err error) { c.Mode, err = syncmode.Parse(v); return }},
	{flag: "api-url", env: "SVC_API_URL", usage: "API base URL for /internal calls (checkpoint records)", set: str(func(c *Config) *string { return &c.APIURL })},
	{flag: "runtime-token", env: "SVC_RUNTIME_TOKEN", secret: true, usage: "this project's runtime token (required)", set: str(func(c *Config) *string { return &c.RuntimeToken })},
	{flag: "storage", env: "SVC_STORAGE", def: "fs", usage: "object store backend: fs or s3", set: str(func(c *Config) *string { return &c.Storage })},
	{flag: "data-dir", env: "SVC_DATA_DIR", def: "./.data", usage: "data directory (the fs object store lives in <data-dir>/store)", set: str(func(c *Config) *string { return &c.DataDir })},
	{flag: "s3-endpoint", env: "SVC_S3_ENDPOINT", usage: "S3 endpoint host:port", set: str(func(c *Config) *string { return &c.S3Endpoint })},
	{flag: "s3-bucket", env: "SVC_S3_BUCKET", def: "svc", usage: "S3 bucket", set: str(func(c *Config) *string { return &c.S3Bucket })},
	{flag: "s3-access-key", env: "SVC_S3_ACCESS_KEY", secret: true, usage: "S3 access key", set: str(func(c *Config) *string { return &c.S3AccessKey })},
	{flag: "s3-secret-key", env: "SVC_S3_SECRET_KEY", secret: true, usage: "S3 secret key", set: str(func(c *Config) *string { return &c.S3SecretKey })},
	{flag: "s3-use-ssl", env: "SVC_S3_USE_SSL", def: "false", usage: "use TLS to reach S3", set: func(c *Config, v string) (err error) { c.S3UseSSL, err = strconv.ParseBool(v); return }},
	{flag: "workspace-dir", env: "SVC_WORKSPACE_DIR", def: "./workspace", usage: "the project's work tree (the pod owns it and its .git)", set: str(func(c *Config) *string { return &c.WorkspaceDir })},
	{flag: "large-file-bytes", env: "LARGE_FILE_BYTES", def: strconv.Itoa(DefaultLargeFileBytes), usage: "files above this size are tracked as large files", set: func(c *Config, v string) (err error) { c.LargeFileBytes, err = strconv.ParseInt(v, 10, 64); return }},
	{flag: "degrade-after-failures", env: "SVC_DEGRADE_AFTER_FAILURES", def: "3", usage: "degradeAfterFailures: consecutive persist failures before degraded", set: func(c *Config, v string) (err error) { c.DegradeAfterFailures, err = strconv.Atoi(v); return }},
	{flag: "http-addr", env: "SVC_HTTP_ADDR", def: "127.0.0.1:8081", usage: "listen address", set: str(func(c *Config) *string { return &c.HTTPAddr })},
	{flag: "pprof-addr", env: "SVC_PPROF_ADDR", usage: "serve net/http/pprof on this address (off when empty; keep it on loopback)", set: str(func(c *Config) *string { return &c.PprofAddr })},
	{flag: "log-level", env: "SVC_LOG_LEVEL", def: "info", usage: "debug, info, warn, error", set: str(func(c *Config) *string { return &c.LogLevel })},
	{flag: "persist-retry-min", env: "SVC_PERSIST_RETRY_MIN", def: "1s", usage: "first backoff of background persist/record retries", set: dur(func(c *Config) *time.Duration { return &c.PersistRetryMin })},
	{flag: "persist-retry-max", env: "SVC_PERSIST_RETRY_MAX", def: "60s", usage: "cap of background persist/record retry backoff", set: dur(func(c *Config) *time.Duration { return &c.PersistRetryMax })},
	{flag: "shutdown-grace", env: "SVC_SHUTDOWN_GRACE", def: "25s", usage: "time from SIGTERM to SIGKILL the runtime grants; the drain gets what the final git (5 s) and S3 (10 s) flushes leave", set: dur(func(c *Config) *time.Duration { return &c.ShutdownGrace })},
	{flag: "lfs", env: "SVC_LFS", def: "true", usage: "track files above LARGE_FILE_BYTES and curated binary types with git-lfs through the API's batch endpoint (spec 10.3)", set: func(c *Config, v string) (err error) { c.LFS, err = strconv.ParseBool(v); return }},
}

// Parse reads flags from args, then fills everything not given on the
// command line from getenv (or <VAR>_FILE for secrets), then defaults.
func Parse(name string, args []string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	vals := make([]*string, len(options))
	for i, o := range options {
		usage := fmt.Sprintf("%s (env %s", o.usage, o.env)
		if o.secret {
			usage += " or " + o.env + "_FILE"
		}
		if o.def != "" {
			usage += fmt.Sprintf(", default %q", o.def)
		}
		vals[i] = fs.String(o.flag, "", usage+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	c := &Config{}
	for i, o := range options {
		v, err := o.value(given[o.flag], *vals[i], getenv)
		if err != nil {
			return nil, err
		}
		if err := o.set(c, v); err != nil {
			return nil, fmt.Errorf("config: %s: %w", o.env, err)
		}
	}
	return c, c.validate()
}

func (o option) value(flagGiven bool, flagVal string, getenv func(string) string) (string, error) {
	if flagGiven {
		return flagVal, nil
	}
	if v := getenv(o.env); v != "" {
		return v, nil
	}
	if o.secret {
		if path := getenv(o.env + "_FILE"); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("config: %s_FILE: %w", o.env, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	return o.def, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.ProjectID == "" {
		errs = append(errs, errors.New("SVC_PROJECT_ID is required"))
	} else if strings.ContainsAny(c.ProjectID, "/\\\x00") || c.ProjectID == "." || c.ProjectID == ".." {
		errs = append(errs, fmt.Errorf("SVC_PROJECT_ID %q is not a valid project id", c.ProjectID))
	}
	if c.RuntimeToken == "" {
		errs = append(errs, errors.New("SVC_RUNTIME_TOKEN (or SVC_RUNTIME_TOKEN_FILE) is required"))
	}
	switch c.Storage {
	case "fs":
	case "s3":
		if c.S3Endpoint == "" || c.S3Bucket == "" {
			errs = append(errs, errors.New("SVC_STORAGE=s3 needs SVC_S3_ENDPOINT and SVC_S3_BUCKET"))
		}
	default:
		errs = append(errs, fmt.Errorf("SVC_STORAGE must be fs or s3, not %q", c.Storage))
	}
	if c.LargeFileBytes <= 0 {
		errs = append(errs, errors.New("LARGE_FILE_BYTES must be positive"))
	}
	if c.DegradeAfterFailures <= 0 {
		errs = append(errs, errors.New("SVC_DEGRADE_AFTER_FAILURES must be positive"))
	}
	if c.Mode == syncmode.DualShadow && c.APIURL == "" {
		errs = append(errs, fmt.Errorf("%s=dual_shadow needs SVC_API_URL: the pod pushes each turn to the API's git endpoint", syncmode.EnvVar))
	}
	return errors.Join(errs...)
}
