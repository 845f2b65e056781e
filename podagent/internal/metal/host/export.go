package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// ErrFenced means another writer replaced an archive since this host last
// saw it: the host stops writing it (spec 10.1.1, the fencing of the pod).
var ErrFenced = errors.New("metal host: an archive was overwritten by another writer; export fenced")

func keyOf(id, part string) string {
	switch part {
	case wire.MetalPartGit:
		return objstore.RepoKey(id)
	case wire.MetalPartSrc:
		return objstore.SourceKey(id)
	default:
		return objstore.DataKey(id)
	}
}

// exportLoop pulls .git and the data archive every ExportInterval.
func (h *Host) exportLoop(p *project) {
	defer close(p.loopDone)
	wait.Ticks(p.loopStop, h.o.ExportInterval, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := h.Export(ctx, p.id, false); err != nil {
			h.log.Warn("periodic export failed", zap.String("projectId", p.id), zap.Error(err))
		}
		cancel()
		return true
	})
}

func (p *project) stopLoop() {
	if p.loopStop == nil {
		return
	}
	select {
	case <-p.loopStop:
	default:
		close(p.loopStop)
	}
	<-p.loopDone
}

// Export pulls .git (the guest commits first) and the data archive from a
// running guest into object storage; withSource adds the source archive
// (suspend).
func (h *Host) Export(ctx context.Context, id string, withSource bool) error {
	h.mu.Lock()
	p := h.projects[id]
	h.mu.Unlock()
	if p == nil || p.vm == nil {
		return fmt.Errorf("metal host: project %s has no VM", id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.exportLocked(ctx, p, withSource)
}

func (h *Host) exportLocked(ctx context.Context, p *project, withSource bool) error {
	parts := []string{wire.MetalPartGit, wire.MetalPartData}
	if withSource {
		parts = append(parts, wire.MetalPartSrc)
	}
	for _, part := range parts {
		if err := h.exportPart(ctx, p, part); err != nil {
			h.Metrics.Exports.WithLabelValues(part, "error").Inc()
			return fmt.Errorf("export %s: %w", part, err)
		}
		h.Metrics.Exports.WithLabelValues(part, "ok").Inc()
	}
	h.mu.Lock()
	p.lastExport = time.Now()
	h.mu.Unlock()
	return nil
}

func (h *Host) exportPart(ctx context.Context, p *project, part string) error {
	if p.vm == nil || !p.vm.Alive() {
		return errors.New("the VM is not running")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url.JoinPath(internalapi.PodMetalExport+part).String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("guest answered %d: %s", resp.StatusCode, b)
	}
	return h.putFenced(ctx, p, keyOf(p.id, part), resp.Body)
}

// putFenced spools r to a file and stores it under key, only over the
// version this host last saw (or only if absent).
func (h *Host) putFenced(ctx context.Context, p *project, key string, r io.Reader) error {
	f, err := os.CreateTemp(p.dir, "export-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, r)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h.mu.Lock()
	if p.etags == nil {
		p.etags = map[string]string{}
	}
	etag := p.etags[key]
	h.mu.Unlock()
	opts := objstore.PutOptions{ContentType: "application/gzip", IfMatch: etag}
	if etag == "" {
		opts.IfNoneMatch = "*"
	}
	info, err := h.o.Store.Put(ctx, key, f, n, opts)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		h.log.Error("export fenced: the archive changed since this host last saw it", zap.String("projectId", p.id),
			zap.String("key", key), zap.String("expectedETag", etag))
		return errors.Join(ErrFenced, err)
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	p.etags[key] = info.ETag
	h.mu.Unlock()
	if key == objstore.RepoKey(p.id) {
		// The exported archive is the whole .git: a manifest a pod outside
		// the host wrote would name older refs (docs/sync-modes.md §13.7).
		if err := h.o.Store.Delete(ctx, objstore.RepoManifestKey(p.id)); err != nil {
			return fmt.Errorf("delete the manifest the export supersedes: %w", err)
		}
	}
	return nil
}

func pipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }
