package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/podagent/internal/metal/guest"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wait"
	"github.com/svc-dev/svc/shared/wire"
)

// Stop ends a project's VM. Suspend exports everything (the source archive
// too) and, with snapshots on, saves the VM state; if the export fails the
// VM is discarded instead (rescue). Discard rescues and drops the VM.
func (h *Host) Stop(ctx context.Context, id, mode string) (wire.MetalProject, error) {
	h.mu.Lock()
	p := h.projects[id]
	running := p != nil && p.vm != nil && p.state == StateRunning
	h.mu.Unlock()
	if !running {
		return h.Status(id), nil
	}
	switch mode {
	case wire.MetalStopDiscard:
		return h.Status(id), h.Discard(ctx, id, "discarded by the API")
	case wire.MetalStopSuspend, "":
	default:
		return h.Status(id), fmt.Errorf("metal host: stop mode must be %s or %s", wire.MetalStopSuspend, wire.MetalStopDiscard)
	}
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.stopLoop()
	p.mu.Lock()
	if h.stateOf(p) != StateRunning {
		p.mu.Unlock()
		return h.Status(id), nil // discarded while we waited
	}
	err := h.exportLocked(ctx, p, true)
	if err != nil {
		p.mu.Unlock()
		h.log.Warn("export at suspend failed; discarding with rescue", zap.String("projectId", id), zap.Error(err))
		return h.Status(id), h.discard(ctx, p, "export at suspend failed: "+err.Error())
	}
	defer p.mu.Unlock()
	if h.o.Snapshots {
		if err := h.saveSnapshot(ctx, p); err == nil {
			h.finish(p, StateSuspended, "")
			return h.Status(id), nil
		} else {
			h.log.Warn("saving the VM state failed; the next start cold-boots", zap.String("projectId", id), zap.Error(err))
		}
	}
	h.powerOff(p)
	_ = os.Remove(h.diskPath(id))
	h.finish(p, StateSuspended, "")
	return h.Status(id), nil
}

// powerOff asks the guest to flush and end, then makes sure QEMU is gone.
func (h *Host) powerOff(p *project) {
	if p.vm.Alive() {
		req, _ := http.NewRequest(http.MethodPost, p.url.JoinPath(internalapi.PodMetalPoweroff).String(), nil)
		req.Header.Set("Authorization", "Bearer "+p.token)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if resp, err := h.client.Do(req.WithContext(ctx)); err == nil {
			resp.Body.Close()
		}
		cancel()
		select {
		case <-p.vm.Done():
		case <-time.After(10 * time.Second):
		}
		if p.vm.Alive() {
			p.vm.Quit(5 * time.Second)
		}
	}
}

func (h *Host) finish(p *project, state, lastErr string) {
	if p.relay != nil {
		p.relay.close()
	}
	h.setState(p, state, lastErr)
	if h.o.OnStopped != nil {
		h.o.OnStopped(p.id, state)
	}
}

// healthGate probes the guest's /healthz every HealthInterval; after
// HealthFailures failures in a row the VM is discarded (rescued first).
func (h *Host) healthGate(p *project) {
	failures := 0
	wait.Ticks(p.vm.Done(), h.o.HealthInterval, func() bool {
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if stopping {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.o.HealthTimeout)
		err := h.probe(ctx, p)
		cancel()
		if err == nil {
			failures = 0
			return true
		}
		failures++
		h.log.Warn("guest health probe failed", zap.String("projectId", p.id), zap.Int("failures", failures), zap.Error(err))
		if failures >= h.o.HealthFailures {
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Minute)
			_ = h.discard(dctx, p, fmt.Sprintf("health gate: %d failed probes: %v", failures, err))
			dcancel()
			return false
		}
		return true
	})
}

func (h *Host) probe(ctx context.Context, p *project) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url.JoinPath(internalapi.PodHealthz).String(), nil)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %d", resp.StatusCode)
	}
	return nil
}

// reap is the dead-VM reaper: a VM that exits while nobody stops it is
// discarded (its disk rescued).
func (h *Host) reap(p *project) {
	<-p.vm.Done()
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		return
	}
	h.log.Error("the guest's VM exited unexpectedly; rescuing its workspace", zap.String("projectId", p.id),
		zap.NamedError("exit", p.vm.ExitErr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_ = h.Discard(ctx, p.id, fmt.Sprintf("the VM exited unexpectedly: %v", p.vm.ExitErr()))
}

// Discard rescues the project's workspace and drops its VM (spec 10.5):
// the guest's export if it answers; otherwise the VM is stopped and its
// disk read read-only; if nothing is saved, the disk is quarantined with a
// JSON note and metal_rescue_failed_quarantined_total increments.
func (h *Host) Discard(ctx context.Context, id, reason string) error {
	h.mu.Lock()
	p := h.projects[id]
	h.mu.Unlock()
	if p == nil || p.vm == nil {
		return fmt.Errorf("metal host: project %s has no VM", id)
	}
	return h.discard(ctx, p, reason)
}

func (h *Host) discard(ctx context.Context, p *project, reason string) error {
	first := false
	var err error
	p.discardOnce.Do(func() {
		first = true
		err = h.doDiscard(ctx, p, reason)
		close(p.discarded)
	})
	if !first {
		<-p.discarded // the reaper and a caller raced: wait for the one discard
	}
	return err
}

func (h *Host) doDiscard(ctx context.Context, p *project, reason string) error {
	if h.stateOf(p) != StateRunning {
		return nil
	}
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.stopLoop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.stateOf(p) != StateRunning {
		return nil // a suspend finished while we waited
	}
	log := h.log.With(zap.String("projectId", p.id), zap.String("reason", reason))
	var errs []error
	if p.vm.Alive() {
		pctx, pcancel := context.WithTimeout(ctx, h.o.HealthTimeout)
		err := h.probe(pctx, p) // export only from a guest that answers
		pcancel()
		if err == nil {
			ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err = h.exportLocked(ectx, p, false)
			cancel()
		}
		if err == nil {
			log.Info("rescued the workspace through the guest's export")
			p.vm.Quit(5 * time.Second)
			_ = os.Remove(h.diskPath(p.id))
			h.finish(p, StateRescued, reason)
			return nil
		}
		errs = append(errs, fmt.Errorf("guest export: %w", err))
		p.vm.Kill()
	}
	saved, err := h.rescueDisk(ctx, p)
	if err != nil {
		errs = append(errs, fmt.Errorf("disk: %w", err))
	}
	if saved {
		log.Info("rescued the workspace from the VM's disk", zap.Errors("earlier", errs))
		_ = os.Remove(h.diskPath(p.id))
		h.finish(p, StateRescued, reason)
		return nil
	}
	note, qerr := h.quarantine(p, reason, errs)
	h.Metrics.RescueFailedQuarantined.Inc()
	log.Error("nothing of the workspace could be saved; the disk is quarantined", zap.String("note", note),
		zap.Errors("errors", errs), zap.NamedError("quarantine", qerr))
	h.finish(p, StateQuarantined, errors.Join(errs...).Error())
	return errors.Join(append(errs, qerr)...)
}

// rescueDisk reads the stopped VM's disk without mounting or writing it
// and stores .git and the work tree. It reports whether anything was saved.
func (h *Host) rescueDisk(ctx context.Context, p *project) (bool, error) {
	scratch, err := os.MkdirTemp(p.dir, "rescue-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(scratch)
	dump := filepath.Join(scratch, "dump")
	if err := h.o.Tools.Dump(ctx, h.diskPath(p.id), "/"+guest.WorkspaceRel, dump, scratch); err != nil {
		return false, err
	}
	ws := filepath.Join(dump, guest.WorkspaceRel)
	saved := false
	var errs []error
	if _, err := os.Stat(filepath.Join(ws, ".git", "HEAD")); err == nil {
		pr, pw := pipe()
		go func() {
			_, err := repoarchive.Create(pw, filepath.Join(ws, ".git"), repoarchive.Options{})
			pw.CloseWithError(err)
		}()
		if err := h.putFenced(ctx, p, objstore.RepoKey(p.id), pr); err != nil {
			errs = append(errs, fmt.Errorf(".git: %w", err))
		} else {
			saved = true
		}
	}
	pr, pw := pipe()
	go func() { _, err := guest.WriteData(pw, ws); pw.CloseWithError(err) }()
	if err := h.putFenced(ctx, p, objstore.DataKey(p.id), pr); err != nil {
		errs = append(errs, fmt.Errorf("data: %w", err))
	} else {
		saved = true
	}
	return saved, errors.Join(errs...)
}

// quarantine moves the disk aside with a note for operators.
func (h *Host) quarantine(p *project, reason string, errs []error) (string, error) {
	stamp := time.Now().UTC().Format("20060102T150405Z")
	base := filepath.Join(h.o.Dir, "quarantine", p.id+"-"+stamp)
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	note := map[string]any{"projectId": p.id, "reason": reason, "errors": msgs, "quarantinedAt": time.Now().UTC(),
		"disk": base + ".ext4", "etags": p.etags,
		"remedy": "inspect the disk with debugfs or e2fsck on a copy; the durable archives hold the last export"}
	var moveErr error
	if err := os.Rename(h.diskPath(p.id), base+".ext4"); err != nil {
		moveErr = err
		note["disk"] = ""
		note["diskError"] = err.Error()
	}
	b, _ := json.MarshalIndent(note, "", "  ")
	if err := os.WriteFile(base+".json", b, 0o600); err != nil {
		return "", errors.Join(moveErr, err)
	}
	return base + ".json", moveErr
}

// snapshotMeta is what a snapshot records: the ETags of the archives
// current when it was taken (after the suspend export).
type snapshotMeta struct {
	ProjectID string            `json:"projectId"`
	TakenAt   time.Time         `json:"takenAt"`
	ETags     map[string]string `json:"etags"`
}

func (h *Host) saveSnapshot(ctx context.Context, p *project) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if strings.ContainsAny(h.snapPath(p.id), " '\";|&$`") {
		return errors.New("snapshot path has shell characters")
	}
	if err := p.vm.Save(sctx, h.snapPath(p.id)); err != nil {
		p.vm.Kill()
		_ = os.Remove(h.snapPath(p.id))
		return err
	}
	h.mu.Lock()
	meta := snapshotMeta{ProjectID: p.id, TakenAt: time.Now().UTC(), ETags: map[string]string{}}
	for k, v := range p.etags {
		meta.ETags[k] = v
	}
	h.mu.Unlock()
	b, _ := json.Marshal(meta)
	return os.WriteFile(h.snapMeta(p.id), b, 0o600)
}

// currentSnapshot returns the recorded ETags when the project has a
// snapshot whose archives are all unchanged; a stale snapshot is dropped
// and counted (metal_stale_snapshot_skipped_total).
func (h *Host) currentSnapshot(ctx context.Context, id string, log *zap.Logger) (map[string]string, bool) {
	b, err := os.ReadFile(h.snapMeta(id))
	if err != nil {
		return nil, false
	}
	var meta snapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil || meta.ProjectID != id {
		h.dropSnapshot(id)
		return nil, false
	}
	if _, err := os.Stat(h.snapPath(id)); err != nil {
		h.dropSnapshot(id)
		return nil, false
	}
	if _, err := os.Stat(h.diskPath(id)); err != nil {
		h.dropSnapshot(id)
		return nil, false
	}
	for key, want := range meta.ETags {
		info, err := h.o.Store.Head(ctx, key)
		got := info.ETag
		if errors.Is(err, objstore.ErrNotExist) {
			got, err = "", nil
		}
		if err != nil || got != want {
			h.Metrics.StaleSnapshotSkipped.Inc()
			log.Warn("snapshot skipped: an archive it recorded was overwritten; cold booting from storage",
				zap.String("key", key), zap.String("recordedETag", want), zap.String("currentETag", got), zap.Error(err))
			h.dropSnapshot(id)
			// Everything on the disk was exported before the snapshot was
			// taken, and storage is newer now: the disk is spent too.
			_ = os.Remove(h.diskPath(id))
			return nil, false
		}
	}
	return meta.ETags, true
}

func (h *Host) dropSnapshot(id string) {
	_ = os.Remove(h.snapPath(id))
	_ = os.Remove(h.snapMeta(id))
}

// Close suspends every running guest (in parallel).
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	var ids []string
	for id, p := range h.projects {
		if p.state == StateRunning {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	errc := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			_, err := h.Stop(ctx, id, wire.MetalStopSuspend)
			errc <- err
		}()
	}
	var errs []error
	for range ids {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// rescueLeftover saves a disk a previous host process left behind (it died
// with its VMs, which die with it): the disk may hold turns never exported.
// Fencing uses the archives' current ETags.
func (h *Host) rescueLeftover(ctx context.Context, p *project, log *zap.Logger) {
	if _, err := os.Stat(h.diskPath(p.id)); err != nil {
		return
	}
	p.etags = map[string]string{}
	for _, key := range []string{objstore.RepoKey(p.id), objstore.DataKey(p.id)} {
		if info, err := h.o.Store.Head(ctx, key); err == nil {
			p.etags[key] = info.ETag
		}
	}
	saved, err := h.rescueDisk(ctx, p)
	if saved {
		log.Info("rescued a disk left by an earlier host process", zap.NamedError("partial", err))
		_ = os.Remove(h.diskPath(p.id))
		return
	}
	note, qerr := h.quarantine(p, "disk left by an earlier host process", []error{err})
	h.Metrics.RescueFailedQuarantined.Inc()
	log.Error("a disk left by an earlier host process could not be read; quarantined", zap.String("note", note),
		zap.Error(err), zap.NamedError("quarantine", qerr))
}

func (h *Host) stateOf(p *project) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return p.state
}
