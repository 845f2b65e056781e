// Package lfs is the git_only large-file handling of the pod (spec 10.3),
// built on the real git-lfs and the API's batch endpoint (spec 4.3 "batch";
// objects land in object storage under <projectId>/lfs/objects/<oid>):
//
//   - Setup: the lfs filter is configured in the repository with pointer
//     smudge skipped (the work tree holds real bytes because the pod wrote
//     them or Pull fetched them, never because a checkout smudged them), and
//     a curated block of .gitattributes routes images, video, archives and
//     model weights to the filter.
//   - TrackLarge, before each add: every new or modified file above
//     LARGE_FILE_BYTES that the attributes do not already route to lfs is
//     tracked with `git lfs track --filename`.
//   - Push, after commit: the objects of the local cache not yet pushed go
//     to the batch endpoint with `git lfs push --object-id`; the answer
//     omits actions for objects already stored, so nothing is uploaded twice.
//   - Pull, at cold start after .git is restored: `git lfs pull` replaces
//     the pointer files of HEAD with their bytes.
//
// Spec 5.3: the runtime bearer and the endpoint are given to each git-lfs
// invocation as per-invocation config (the environment form of `git -c`,
// GIT_CONFIG_PARAMETERS, so the token is not even in the process arguments):
// `lfs.url=<api>/internal/projects/<id>/lfs` and
// `http.<that url>.extraHeader=Authorization: Bearer <token>`. Neither is
// ever written to .git/config.
//
// Every call goes through the shared git runner (gitrun).
package lfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/settings"
)

// StateDir is the pod's own directory inside .git (never archived; it is
// durable.StateDirName, repeated here to keep the packages apart).
const StateDir = "svc-agent"

// pushedFile lists the oids this pod pushed, one per line.
const pushedFile = "lfs-pushed"

// pushChunk bounds the oids of one `git lfs push --object-id` call.
const pushChunk = 200

// AttributesBegin and AttributesEnd delimit the curated block of .gitattributes.
const (
	AttributesBegin = "# >>> svc large files (managed by the pod; spec 10.3)"
	AttributesEnd   = "# <<< svc large files"
)

// CuratedExtensions are routed to the large-file filter on repo setup:
// images, video, archives and model weights.
var CuratedExtensions = []string{
	// images
	"png", "jpg", "jpeg", "gif", "webp", "avif", "bmp", "tif", "tiff", "psd", "heic", "ico",
	// video
	"mp4", "mov", "webm", "avi", "mkv", "m4v",
	// archives
	"zip", "tar", "gz", "tgz", "bz2", "xz", "7z", "rar", "zst",
	// model weights
	"safetensors", "ckpt", "pt", "pth", "onnx", "gguf", "h5", "tflite", "pb",
}

// Options configure the large-file handling of one workspace.
type Options struct {
	Dir       string // the work tree
	Runner    *gitrun.Runner
	APIURL    string // the API base URL (SVC_API_URL)
	ProjectID string
	Token     string // the project's runtime token
	// Threshold is LARGE_FILE_BYTES: files above it are tracked.
	Threshold int64
	// Timeout bounds one push or pull (default 10 minutes).
	Timeout time.Duration
	Log     *zap.Logger
}

// LFS implements gitsync.LargeFiles and coldstart's large-file hooks.
type LFS struct {
	o   Options
	log *zap.Logger

	mu     sync.Mutex
	pushed map[string]bool // oids known to be stored; loaded lazily
}

// New returns the large-file handling of o.Dir.
func New(o Options) *LFS {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	o.Timeout = settings.PositiveOr(o.Timeout, 10*time.Minute)
	return &LFS{o: o, log: o.Log.Named("lfs")}
}

// Endpoint is the lfs.url of the project: <api>/internal/projects/<id>/lfs
// (git-lfs appends /objects/batch).
func (l *LFS) Endpoint() string {
	return internalapi.ProjectURL(l.o.APIURL, l.o.ProjectID, internalapi.PathLFS)
}

func (l *LFS) git(args ...gitrun.Arg) *gitrun.Cmd {
	return l.o.Runner.Command(args...).Dir(l.o.Dir)
}

// transferEnv is the per-invocation config of a command that talks to the
// batch endpoint, in the environment form of `git -c` (git passes it on to
// git-lfs and to the git-config calls git-lfs makes).
func (l *LFS) transferEnv() []string {
	ep := l.Endpoint()
	kv := [][2]string{
		{"lfs.url", ep},
		{"http." + ep + ".extraHeader", "Authorization: Bearer " + l.o.Token},
		{"lfs.locksverify", "false"},
		{"lfs.transfer.maxretries", "2"},
		{"lfs.transfer.maxretrydelay", "2"},
		{"lfs.dialtimeout", "10"},
		{"lfs.activitytimeout", "60"},
		{"credential.helper", ""},
	}
	return []string{gitrun.ConfigParameters(kv), "GIT_LFS_SKIP_SMUDGE=1"}
}

// Setup configures the lfs filter (smudge skipped) in the repository's
// local config and makes sure .gitattributes holds the curated block. It is
// idempotent; nothing it writes names the endpoint or the token.
func (l *LFS) Setup(ctx context.Context) error {
	for _, kv := range FilterSettings {
		if err := l.git("config", "--local").AddDynamic(kv[0], kv[1]).Run(ctx); err != nil {
			return fmt.Errorf("lfs: configure filter: %w", err)
		}
	}
	return l.ensureAttributes()
}

// FilterSettings are the repository settings Setup writes: the lfs filter
// with pointer smudge skipped.
var FilterSettings = [][2]string{
	{"filter.lfs.process", "git-lfs filter-process --skip"},
	{"filter.lfs.clean", "git-lfs clean -- %f"},
	{"filter.lfs.smudge", "git-lfs smudge --skip -- %f"},
	{"filter.lfs.required", "true"},
	{"lfs.repositoryformatversion", "0"},
}

// CuratedBlock is the managed block of .gitattributes.
func CuratedBlock() string {
	var b strings.Builder
	b.WriteString(AttributesBegin + "\n")
	for _, ext := range CuratedExtensions {
		fmt.Fprintf(&b, "*.%s filter=lfs diff=lfs merge=lfs -text\n", caseInsensitive(ext))
	}
	b.WriteString(AttributesEnd + "\n")
	return b.String()
}

// caseInsensitive turns "png" into "[pP][nN][gG]".
func caseInsensitive(ext string) string {
	var b strings.Builder
	for _, r := range ext {
		lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r))
		if lo == up {
			b.WriteRune(r)
			continue
		}
		b.WriteString("[" + lo + up + "]")
	}
	return b.String()
}

func (l *LFS) ensureAttributes() error {
	path := filepath.Join(l.o.Dir, ".gitattributes")
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if bytes.Contains(cur, []byte(AttributesBegin)) {
		return nil
	}
	var b bytes.Buffer
	b.Write(cur)
	if len(cur) > 0 && !bytes.HasSuffix(cur, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteString(CuratedBlock())
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// TrackLarge tracks every new or modified file above the threshold that is
// not already routed to the lfs filter. Called under the repository lock
// before `git add`.
func (l *LFS) TrackLarge(ctx context.Context) error {
	if l.o.Threshold <= 0 {
		return nil
	}
	out, err := l.git("ls-files", "-z", "--others", "--modified", "--exclude-standard").Output(ctx)
	if err != nil {
		return fmt.Errorf("lfs: list changed files: %w", err)
	}
	seen := map[string]bool{}
	var big []string
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		fi, err := os.Lstat(filepath.Join(l.o.Dir, filepath.FromSlash(p)))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() <= l.o.Threshold {
			continue
		}
		big = append(big, p)
	}
	if len(big) == 0 {
		return nil
	}
	untracked, err := l.notRoutedToLFS(ctx, big)
	if err != nil || len(untracked) == 0 {
		return err
	}
	sort.Strings(untracked)
	if err := l.git("lfs", "track", "--filename").AddDashesAndList(untracked...).Run(ctx); err != nil {
		return fmt.Errorf("lfs: track: %w", err)
	}
	l.log.Info("tracking large files", zap.Strings("paths", untracked), zap.Int64("threshold", l.o.Threshold))
	return nil
}

// notRoutedToLFS returns the paths whose filter attribute is not lfs.
func (l *LFS) notRoutedToLFS(ctx context.Context, paths []string) ([]string, error) {
	in := strings.Join(paths, "\x00") + "\x00"
	out, err := l.git("check-attr", "-z", "--stdin", "filter").Stdin(strings.NewReader(in)).Output(ctx)
	if err != nil {
		return nil, fmt.Errorf("lfs: check-attr: %w", err)
	}
	f := strings.Split(string(out), "\x00")
	var res []string
	for i := 0; i+2 < len(f); i += 3 { // path NUL attribute NUL value NUL
		if f[i+2] != "lfs" {
			res = append(res, f[i])
		}
	}
	return res, nil
}

var oidRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// LocalObjects lists the oids in the local large-file cache (.git/lfs/objects).
func (l *LFS) LocalObjects() ([]string, error) {
	root := filepath.Join(l.o.Dir, ".git", "lfs", "objects")
	var oids []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() && oidRE.MatchString(d.Name()) {
			oids = append(oids, d.Name())
		}
		return nil
	})
	sort.Strings(oids)
	return oids, err
}

func (l *LFS) pushedPath() string {
	return filepath.Join(l.o.Dir, ".git", StateDir, pushedFile)
}

func (l *LFS) loadPushedLocked() {
	if l.pushed != nil {
		return
	}
	l.pushed = map[string]bool{}
	f, err := os.Open(l.pushedPath())
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if oid := strings.TrimSpace(sc.Text()); oidRE.MatchString(oid) {
			l.pushed[oid] = true
		}
	}
}

func (l *LFS) markPushedLocked(oids []string) error {
	if err := os.MkdirAll(filepath.Dir(l.pushedPath()), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(l.pushedPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, oid := range oids {
		l.pushed[oid] = true
		b.WriteString(oid + "\n")
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Pending returns the local objects not yet known to be stored.
func (l *LFS) Pending() ([]string, error) {
	oids, err := l.LocalObjects()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loadPushedLocked()
	var out []string
	for _, oid := range oids {
		if !l.pushed[oid] {
			out = append(out, oid)
		}
	}
	return out, nil
}

// Push uploads every local object not yet pushed. It succeeds without any
// request when there is nothing to push; then every object of the local
// cache is in object storage and the .git archive may leave the cache out.
func (l *LFS) Push(ctx context.Context) error {
	pending, err := l.Pending()
	if err != nil {
		return fmt.Errorf("lfs: list local objects: %w", err)
	}
	if len(pending) == 0 {
		return nil
	}
	start := time.Now()
	for i := 0; i < len(pending); i += pushChunk {
		chunk := pending[i:min(i+pushChunk, len(pending))]
		err := l.git("lfs", "push", "--object-id").AddDynamic(l.Endpoint()).AddDynamic(chunk...).
			Env(l.transferEnv()...).Timeout(l.o.Timeout).Run(ctx)
		if err != nil {
			return fmt.Errorf("lfs: push: %w", err)
		}
		l.mu.Lock()
		err = l.markPushedLocked(chunk)
		l.mu.Unlock()
		if err != nil {
			l.log.Warn("saving pushed large-file list", zap.Error(err))
		}
	}
	l.log.Info("pushed large files", zap.Int("objects", len(pending)), zap.Duration("took", time.Since(start)))
	return nil
}

// Pull downloads the large files of HEAD and writes them over their
// pointer files (spec 10.3, cold start after .git is restored).
func (l *LFS) Pull(ctx context.Context) error {
	if !l.headHasPointers(ctx) {
		return nil
	}
	start := time.Now()
	before, _ := l.LocalObjects()
	if err := l.git("lfs", "pull").AddDynamic(l.Endpoint()).Env(l.transferEnv()...).Timeout(l.o.Timeout).Run(ctx); err != nil {
		return fmt.Errorf("lfs: pull: %w", err)
	}
	// What was just downloaded is stored already. Objects that came with
	// the .git archive (a push had failed) stay pending for the next Push.
	if after, err := l.LocalObjects(); err == nil {
		had := map[string]bool{}
		for _, oid := range before {
			had[oid] = true
		}
		var fetched []string
		for _, oid := range after {
			if !had[oid] {
				fetched = append(fetched, oid)
			}
		}
		l.mu.Lock()
		l.loadPushedLocked()
		if err := l.markPushedLocked(fetched); err != nil {
			l.log.Warn("saving pushed large-file list", zap.Error(err))
		}
		l.mu.Unlock()
	}
	l.log.Info("pulled large files", zap.Duration("took", time.Since(start)))
	return nil
}

// maxPointerBytes bounds the blobs inspected as possible pointers.
const maxPointerBytes = 1024

// headHasPointers reports whether HEAD's tree holds a large-file pointer:
// two cheap git calls that spare a `git lfs pull` on most cold starts.
func (l *LFS) headHasPointers(ctx context.Context) bool {
	out, err := l.git("ls-tree", "-r", "-l", "-z", "HEAD").Output(ctx)
	if err != nil {
		return false // no HEAD: nothing to pull
	}
	var small []string
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, _, ok := strings.Cut(rec, "\t") // <mode> SP <type> SP <object> SP+ <size> TAB <path>
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" {
			continue
		}
		if n, err := strconv.ParseInt(f[3], 10, 64); err == nil && n <= maxPointerBytes {
			small = append(small, f[2])
		}
	}
	if len(small) == 0 {
		return false
	}
	var buf bytes.Buffer
	err = l.git("cat-file", "--batch").Stdin(strings.NewReader(strings.Join(small, "\n") + "\n")).Stdout(&buf).Run(ctx)
	if err != nil {
		return true // let git lfs pull decide
	}
	return bytes.Contains(buf.Bytes(), []byte("version https://git-lfs.github.com/spec/v1\noid sha256:"))
}
