// Package lfsgc is the reachability-based retention of large-file objects
// that spec 10.3 calls a required follow-up: an object
// <projectId>/lfs/objects/<oid> is deleted when no ref or tag of the
// project's durable repository (<projectId>/repo.git.tar.gz) reaches a
// pointer to it, and only once it is older than the grace period (default
// 7 days), so an object pushed by a turn whose .git is not persisted yet is
// never collected. Every deletion is logged, one line per object, and
// counted in metrics. A project without a durable repository is skipped
// (nothing can be proven unreachable).
package lfsgc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/archive"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wait"
)

// Defaults.
const (
	DefaultGrace    = 7 * 24 * time.Hour
	DefaultInterval = 24 * time.Hour
	maxPointerBytes = 1024
)

// ErrNoRepository: the project has no durable repository; nothing is
// deleted.
var ErrNoRepository = errors.New("lfsgc: the project has no durable repository; nothing collected")

// Metrics of the collector.
type Metrics struct {
	Deleted      prometheus.Counter
	DeletedBytes prometheus.Counter
	Kept         *prometheus.CounterVec
	Errors       prometheus.Counter
}

// NewMetrics registers the collector's metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_lfs_gc_deleted_objects_total",
			Help: "Large-file objects deleted as unreachable from every ref and tag and older than the grace period."}),
		DeletedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_lfs_gc_deleted_bytes_total",
			Help: "Bytes of the large-file objects deleted by the retention job."}),
		Kept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_lfs_gc_kept_objects_total",
			Help: "Large-file objects examined and kept, by reason (reachable, recent)."}, []string{"reason"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_lfs_gc_errors_total",
			Help: "Projects the retention job could not process."}),
	}
	reg.MustRegister(m.Deleted, m.DeletedBytes, m.Kept, m.Errors)
	return m
}

// GC collects unreachable large-file objects.
type GC struct {
	Objects objstore.Store
	Runner  *gitrun.Runner
	// Grace is the minimum age of a deleted object (default DefaultGrace).
	Grace   time.Duration
	TempDir string
	Log     *zap.Logger
	Metrics *Metrics // nil: none
	Now     func() time.Time
}

// Object is one object the collector deleted (or would delete).
type Object struct {
	OID          string    `json:"oid"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"lastModified"`
}

// Result is the outcome for one project.
type Result struct {
	ProjectID  string   `json:"projectId"`
	DryRun     bool     `json:"dryRun"`
	Grace      string   `json:"grace"`
	Stored     int      `json:"stored"`
	Reachable  int      `json:"reachable"`
	KeptRecent int      `json:"keptRecent"`
	Deleted    []Object `json:"deleted"`
}

func (g *GC) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Project collects one project; with dryRun nothing is deleted (the answer
// lists what would be).
func (g *GC) Project(ctx context.Context, projectID string, dryRun bool) (Result, error) {
	grace := g.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	log := g.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("lfsgc")
	res := Result{ProjectID: projectID, DryRun: dryRun, Grace: grace.String(), Deleted: []Object{}}
	reachable, err := g.reachable(ctx, projectID)
	if err != nil {
		if g.Metrics != nil {
			g.Metrics.Errors.Inc()
		}
		return res, err
	}
	prefix := objstore.LFSKey(projectID, "")
	var stored []objstore.ObjectInfo
	if err := g.Objects.List(ctx, prefix, func(oi objstore.ObjectInfo) error {
		stored = append(stored, oi)
		return nil
	}); err != nil {
		return res, err
	}
	res.Stored = len(stored)
	cutoff := g.now().Add(-grace)
	for _, oi := range stored {
		oid := strings.TrimPrefix(oi.Key, prefix)
		switch {
		case reachable[oid]:
			res.Reachable++
			g.kept("reachable")
		case oi.LastModified.After(cutoff):
			res.KeptRecent++
			g.kept("recent")
		default:
			obj := Object{OID: oid, Size: oi.Size, LastModified: oi.LastModified}
			if !dryRun {
				if err := g.Objects.Delete(ctx, oi.Key); err != nil {
					return res, fmt.Errorf("lfsgc: delete %s: %w", oi.Key, err)
				}
				if g.Metrics != nil {
					g.Metrics.Deleted.Inc()
					g.Metrics.DeletedBytes.Add(float64(oi.Size))
				}
			}
			log.Info("large-file object unreachable from every ref and tag", zap.String("projectId", projectID),
				zap.String("key", oi.Key), zap.Int64("bytes", oi.Size), zap.Time("lastModified", oi.LastModified),
				zap.Bool("deleted", !dryRun))
			res.Deleted = append(res.Deleted, obj)
		}
	}
	return res, nil
}

func (g *GC) kept(reason string) {
	if g.Metrics != nil {
		g.Metrics.Kept.WithLabelValues(reason).Inc()
	}
}

var pointerRE = regexp.MustCompile(`(?m)^oid sha256:([0-9a-f]{64})$`)

// reachable extracts the durable repository (the base, every increment
// the manifest lists and the manifest's refs: an object referenced only
// from an increment is live) and returns the oids of every git-lfs
// pointer reachable from any ref or tag.
func (g *GC) reachable(ctx context.Context, projectID string) (map[string]bool, error) {
	man, _, err := repoarchive.GetManifest(ctx, g.Objects, projectID)
	if errors.Is(err, objstore.ErrNotExist) {
		man, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lfsgc: %w", err)
	}
	rc, _, err := g.Objects.Get(ctx, objstore.RepoKey(projectID))
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, ErrNoRepository
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	dir, err := os.MkdirTemp(g.TempDir, "lfsgc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	gitDir := filepath.Join(dir, "repo.git")
	if _, err := archive.ExtractTarGz(rc, gitDir, archive.ExtractOptions{NoLinks: true}); err != nil {
		return nil, fmt.Errorf("lfsgc: extract %s: %w", objstore.RepoKey(projectID), err)
	}
	if man != nil {
		if _, err := repoarchive.FetchIncrements(ctx, g.Objects, man, gitDir, nil); err != nil {
			return nil, fmt.Errorf("lfsgc: %w", err)
		}
		if err := repoarchive.ApplyRefs(gitDir, man); err != nil {
			return nil, fmt.Errorf("lfsgc: %w", err)
		}
	}
	// The archive's config was written by a pod: replace it (nothing in it
	// may take effect here), and drop hooks and the rest of the untrusted
	// parts.
	if err := repoarchive.Sanitize(gitDir, "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"); err != nil {
		return nil, err
	}
	runner := g.Runner
	if runner == nil {
		runner = &gitrun.Runner{}
	}
	git := func(args ...gitrun.Arg) *gitrun.Cmd {
		return runner.Command(args...).Dir(gitDir).Env("GIT_DIR="+gitDir, "GIT_NO_REPLACE_OBJECTS=1")
	}
	objs, err := git("rev-list", "--objects", "--all").Output(ctx)
	if err != nil {
		return nil, fmt.Errorf("lfsgc: rev-list: %w", err)
	}
	var ids strings.Builder
	for _, line := range strings.Split(string(objs), "\n") {
		if id, _, _ := strings.Cut(line, " "); id != "" {
			ids.WriteString(id + "\n")
		}
	}
	// Small blobs only: a pointer is at most maxPointerBytes.
	checks, err := git("cat-file", "--batch-check=%(objecttype) %(objectname) %(objectsize)").
		Stdin(strings.NewReader(ids.String())).Output(ctx)
	if err != nil {
		return nil, fmt.Errorf("lfsgc: cat-file: %w", err)
	}
	var small strings.Builder
	for _, line := range strings.Split(string(checks), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "blob" {
			if n, err := strconv.Atoi(f[2]); err == nil && n <= maxPointerBytes {
				small.WriteString(f[1] + "\n")
			}
		}
	}
	out := map[string]bool{}
	if small.Len() == 0 {
		return out, nil
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- git("cat-file", "--batch").Stdin(strings.NewReader(small.String())).Stdout(pw).Run(ctx)
		pw.Close()
	}()
	br := bufio.NewReader(pr)
	for {
		hdr, err := br.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		f := strings.Fields(hdr)
		if len(f) != 3 {
			continue
		}
		n, _ := strconv.Atoi(f[2])
		body := make([]byte, n+1) // content and its trailing newline
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, err
		}
		if strings.HasPrefix(string(body), "version https://git-lfs.github.com/spec/v1\n") {
			if m := pointerRE.FindSubmatch(body); m != nil {
				out[string(m[1])] = true
			}
		}
	}
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("lfsgc: cat-file --batch: %w", err)
	}
	return out, nil
}

// Job runs the collector over every project on interval until ctx ends.
func (g *GC) Job(ctx context.Context, projects func(ctx context.Context) ([]string, error), interval time.Duration) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	wait.Every(ctx, interval, func(ctx context.Context) {
		ids, err := projects(ctx)
		if err != nil {
			return
		}
		for _, id := range ids {
			if _, err := g.Project(ctx, id, false); err != nil && !errors.Is(err, ErrNoRepository) && g.Log != nil {
				g.Log.Warn("lfs gc", zap.String("projectId", id), zap.Error(err))
			}
		}
	})
}
