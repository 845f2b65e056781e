// Package guest is podagent's micro-VM guest mode (spec 10.5, 7.3): PID 1 of
// a QEMU guest that mounts its workspace disk, swaps in the durable .git the
// host staged (cold boot), checks that git accepts the workspace
// (GIT_UNUSABLE), and serves the pod with export endpoints the host pulls
// .git, the writable state and the source archive from. The guest holds no
// object-storage credentials: its pod persists .git into a store on its own
// disk, and only the host moves artifacts to object storage.
package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/lfs"
	"github.com/svc-dev/svc/shared/gitrun"
)

// Fixed places of the guest (the host writes the disk to match).
const (
	// DataDir is where the workspace disk is mounted.
	DataDir = "/data"
	// GuestCIDR is the guest's address in QEMU's user network.
	GuestCIDR = "10.0.2.15/24"
	// RelayAddr is the guestfwd address the host relays to the API
	// (checkpoint records, the model gateway); the only route out.
	RelayAddr = "10.0.2.100:80"
	// Port is the agent's port inside the guest (hostfwd target).
	Port = 8080
	// CallbackForwardPath is the relay's callback forwarder: the guest's
	// async webhook callbacks leave through the host there
	// (SVC_CALLBACK_FORWARD_URL), under the host's SSRF guard.
	CallbackForwardPath = "/metal/callback"
)

// Layout of the disk, relative to its root (DataDir in the guest).
const (
	WorkspaceRel = "workspace"
	StateRel     = ".svc"
	ConfigRel    = ".svc/guest.json"
	StoreRel     = ".svc" // the pod's fs store is <StoreRel>/store
	// StagingGitRel is the durable .git the host extracted at cold boot
	// (the hydrate signal); the guest swaps it in and removes it.
	StagingGitRel = ".svc/staging/git"
)

// PreHydrateRefPrefix is where Hydrate keeps tracked changes a reset to
// HEAD drops (spec 10.5: the pre-hydrate namespace).
const PreHydrateRefPrefix = "refs/shogo-neutral/pre-hydrate/"

// GitUnusable is the diagnostic code of spec 7.3.
const GitUnusable = "GIT_UNUSABLE"

// Config is what the host tells the guest, in <disk>/.svc/guest.json.
type Config struct {
	ProjectID    string `json:"projectId"`
	RuntimeToken string `json:"runtimeToken"`
	// Env holds further SVC_* pod settings (log level, webhook tuning).
	Env map[string]string `json:"env,omitempty"`
}

// ReadConfig reads the guest config from the mounted disk at root.
func ReadConfig(root string) (Config, error) {
	var c Config
	b, err := os.ReadFile(filepath.Join(root, ConfigRel))
	if err != nil {
		return c, fmt.Errorf("guest config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("guest config: %w", err)
	}
	if c.ProjectID == "" || c.RuntimeToken == "" {
		return c, errors.New("guest config: projectId and runtimeToken are required")
	}
	return c, nil
}

// PodEnv is the pod's environment in the guest: fs storage on the disk,
// the workspace on the disk, the API through the host's relay (large files
// too: the relay points the batch answer's transfers at the host, which
// moves the bytes to and from object storage), async callbacks through the
// host's forwarder.
func (c Config) PodEnv(root string) map[string]string {
	env := map[string]string{}
	for k, v := range c.Env {
		env[k] = v
	}
	for k, v := range map[string]string{
		"SVC_PROJECT_ID":    c.ProjectID,
		"SVC_RUNTIME_TOKEN": c.RuntimeToken,
		"SVC_API_URL":       "http://" + RelayAddr,
		"SVC_STORAGE":       "fs",
		"SVC_DATA_DIR":      filepath.Join(root, StoreRel),
		"SVC_WORKSPACE_DIR": filepath.Join(root, WorkspaceRel),
		"SVC_HTTP_ADDR":     "0.0.0.0:" + strconv.Itoa(Port),
		// Callbacks have no route of their own: the host forwards them.
		"SVC_CALLBACK_FORWARD_URL": "http://" + RelayAddr + CallbackForwardPath,
	} {
		env[k] = v
	}
	return env
}

// CheckGit runs git on the workspace the way a tool without our settings
// would. If git refuses it for dubious ownership, it logs GIT_UNUSABLE with
// the remedy (spec 7.3) and applies it: the workspace is marked safe in the
// system git config, and — as root — exported through GIT_CONFIG_*
// variables to every process started from here. It reports whether git
// refused the workspace.
func CheckGit(ctx context.Context, ws, systemConfig string, log *zap.Logger) (bool, error) {
	r := &gitrun.Runner{Timeout: 30 * time.Second}
	if _, err := os.Stat(filepath.Join(ws, ".git")); err != nil {
		return false, nil // no repository yet: cold start seeds one
	}
	_, err := r.Command("rev-parse", "--git-dir").Dir(ws).String(ctx)
	if err == nil {
		return false, nil
	}
	var gerr *gitrun.Error
	if !errors.As(err, &gerr) || !strings.Contains(gerr.Error(), "dubious ownership") {
		return false, err
	}
	fi, _ := os.Stat(ws)
	log.Error(GitUnusable+": git refuses the workspace for dubious ownership; no history would be persisted. "+
		"Remedy: the workspace is marked safe system-wide (safe.directory) and, as root, exported through GIT_CONFIG_* variables",
		zap.String("code", GitUnusable), zap.String("workspace", ws), zap.Int("uid", os.Geteuid()), zap.Any("owner", ownerOf(fi)))
	if err := os.MkdirAll(filepath.Dir(systemConfig), 0o755); err != nil {
		return true, err
	}
	f, err := os.OpenFile(systemConfig, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return true, err
	}
	_, err = fmt.Fprintf(f, "[safe]\n\tdirectory = %s\n", ws)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if os.Geteuid() == 0 {
		os.Setenv("GIT_CONFIG_COUNT", "1")
		os.Setenv("GIT_CONFIG_KEY_0", "safe.directory")
		os.Setenv("GIT_CONFIG_VALUE_0", ws)
	}
	return true, err
}

// Hydrate swaps the staged durable .git into the workspace (cold boot,
// spec 10.5): the work tree the host hydrated from the source and data
// archives stays; tracked files that differ from HEAD are saved as a
// commit under refs/shogo-neutral/pre-hydrate/<unix-nanos> before the
// work tree is reset to HEAD (untracked and ignored files are kept). It
// returns that ref ("" when nothing differed) and does nothing without a
// staged .git.
func Hydrate(ctx context.Context, r *gitrun.Runner, root string, log *zap.Logger) (string, error) {
	staging := filepath.Join(root, StagingGitRel)
	if _, err := os.Stat(filepath.Join(staging, "HEAD")); err != nil {
		_ = os.RemoveAll(filepath.Dir(staging))
		return "", nil
	}
	ws := filepath.Join(root, WorkspaceRel)
	gitDir := filepath.Join(ws, ".git")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return "", err
	}
	old := gitDir + ".pre-hydrate"
	_ = os.RemoveAll(old)
	if err := os.Rename(gitDir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.Rename(staging, gitDir); err != nil {
		return "", err
	}
	_ = os.RemoveAll(filepath.Dir(staging))
	_ = os.RemoveAll(old)
	// Nothing of a restored config may run a command: start from a clean
	// one, with only our own lfs filter (as the pod's lfs.Setup writes it),
	// so large files the host hydrated as bytes compare equal to HEAD's
	// pointers instead of being kept as pre-hydrate changes.
	if err := os.WriteFile(filepath.Join(gitDir, "config"), []byte(freshConfig()), 0o644); err != nil {
		return "", err
	}
	git := func(args ...gitrun.Arg) *gitrun.Cmd {
		return r.Command(args...).Dir(ws).Env("GIT_AUTHOR_NAME=svc-agent", "GIT_AUTHOR_EMAIL=agent@svc.invalid",
			"GIT_COMMITTER_NAME=svc-agent", "GIT_COMMITTER_EMAIL=agent@svc.invalid")
	}
	if _, err := git("rev-parse", "--verify", "HEAD").String(ctx); err != nil {
		return "", nil // an empty repository: nothing to reset to
	}
	if _, err := os.Stat(filepath.Join(gitDir, "index")); err != nil {
		if err := git("read-tree", "HEAD").Run(ctx); err != nil {
			return "", err
		}
	}
	_ = git("update-index", "-q", "--refresh").Run(ctx) // exits 1 when files differ; diff says how
	ref := ""
	err := git("diff", "--quiet", "HEAD").Run(ctx)
	switch gitrun.ExitCode(err) {
	case 0:
		err = nil
	case 1:
		err = nil
		sha, serr := git("stash", "create", "pre-hydrate: tracked changes dropped by the reset to HEAD").String(ctx)
		if serr != nil {
			return "", serr
		}
		if sha = strings.TrimSpace(sha); sha == "" {
			break
		}
		ref = PreHydrateRefPrefix + strconv.FormatInt(time.Now().UnixNano(), 10)
		if err := git("update-ref").AddDynamic(ref, sha).Run(ctx); err != nil {
			return "", err
		}
	}
	if err != nil {
		return "", err
	}
	if err := git("reset", "-q", "--hard", "HEAD").Run(ctx); err != nil {
		return ref, err
	}
	log.Info("hydrated the durable .git staged by the host", zap.String("preHydrateRef", ref))
	return ref, nil
}

// freshConfig is the .git/config Hydrate starts from.
func freshConfig() string {
	var b strings.Builder
	b.WriteString("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n")
	if _, err := exec.LookPath("git-lfs"); err != nil {
		return b.String()
	}
	for _, kv := range lfs.FilterSettings {
		sec, key, _ := strings.Cut(kv[0], ".")
		if sub, k, ok := strings.Cut(key, "."); ok {
			fmt.Fprintf(&b, "[%s %q]\n\t%s = %q\n", sec, sub, k, kv[1])
		} else {
			fmt.Fprintf(&b, "[%s]\n\t%s = %q\n", sec, key, kv[1])
		}
	}
	return b.String()
}
