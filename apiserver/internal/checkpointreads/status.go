package checkpointreads

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/wire"
)

// StatusResponse is the body of GET …/checkpoints/status.
type StatusResponse struct {
	ProjectID string `json:"projectId"`
	Head      string `json:"head"`
	Branch    string `json:"branch"`
	SyncMode  string `json:"syncMode"`
	// ReadSource is where the project's current files are read from: s3
	// in s3 and dual_shadow, git in git_only (docs/sync-modes.md §5).
	ReadSource     string                `json:"readSource"`
	Source         *hydrate.SourceStatus `json:"source,omitempty"`
	LastCheckpoint *store.Checkpoint     `json:"lastCheckpoint"`
	Durable        DurableStatus         `json:"durable"`
	Published      *PublishedStatus      `json:"published"`
}

// DurableStatus describes <projectId>/repo.git.tar.gz and this replica's copy.
type DurableStatus struct {
	Exists       bool       `json:"exists"`
	ETag         string     `json:"etag,omitempty"`
	Size         int64      `json:"size,omitempty"`
	LastModified *time.Time `json:"lastModified,omitempty"`
	AgeSeconds   *float64   `json:"ageSeconds,omitempty"`
	HydratedAt   *time.Time `json:"hydratedAt,omitempty"`
	Stale        bool       `json:"stale"`
	Error        string     `json:"error,omitempty"`
	// Manifest: the durable manifest's seq, the increments it lists beyond
	// the base and the seq the base holds (docs/sync-modes.md §13); absent
	// for a project without one.
	Manifest *ManifestStatus `json:"manifest,omitempty"`
}

// ManifestStatus is the chain of a durable .git.
type ManifestStatus struct {
	Seq            int64 `json:"seq"`
	Increments     int   `json:"increments"`
	IncrementBytes int64 `json:"incrementBytes"`
	BaseSeq        int64 `json:"baseSeq"`
	BaseBytes      int64 `json:"baseBytes"`
}

// PublishedStatus is the latest publish (spec 10.4.3).
type PublishedStatus struct {
	SHA string `json:"sha"`
	Tag string `json:"tag"`
}

// ReadStatus reports the project's sync state. A project without a durable
// object yet answers with durable.exists false (that is a state worth
// reporting, not an error); other hydrate failures are errors as for every
// read, unless a stale copy can be reported.
func (a *API) ReadStatus(ctx context.Context, proj store.Project, h http.Header) (StatusResponse, error) {
	resp := StatusResponse{ProjectID: proj.ID, SyncMode: string(proj.CloudSyncMode), ReadSource: ReadSource(proj)}
	if h != nil {
		h.Set(ReadSourceHeader, resp.ReadSource)
	}
	if a.Objects != nil {
		src, err := hydrate.SourceHead(ctx, a.Objects, proj.ID)
		if err != nil {
			return StatusResponse{}, wire.Unavailable(err)
		}
		resp.Source = &src
	}
	if proj.PublishedCommitSHA != "" || proj.PublishedTag != "" {
		resp.Published = &PublishedStatus{SHA: proj.PublishedCommitSHA, Tag: proj.PublishedTag}
	}
	last, err := a.Store.LastCheckpoint(ctx, proj.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return StatusResponse{}, wire.Internal(err)
	}
	if err == nil {
		resp.LastCheckpoint = &last
	}
	r, err := a.Hydrate.Acquire(ctx, proj.ID)
	if errors.Is(err, hydrate.ErrNotFound) {
		return resp, nil
	}
	if err != nil {
		return StatusResponse{}, hydrate.APIError(err)
	}
	defer r.Release()
	if h != nil {
		hydrate.SetHeaders(h, r)
	}
	resp.Head, resp.Branch, err = headInfo(ctx, r)
	if err != nil {
		return StatusResponse{}, wire.Internal(err)
	}
	d := &resp.Durable
	d.Exists, d.ETag, d.Size, d.Stale = true, r.Object.ETag, r.Object.Size, r.Stale
	if r.Stale {
		d.Error = hydrate.ErrorCode(r.StaleErr)
	}
	if !r.Object.LastModified.IsZero() {
		lm := r.Object.LastModified.UTC()
		age := a.Now().Sub(lm).Seconds()
		d.LastModified, d.AgeSeconds = &lm, &age
	}
	ha := r.HydratedAt.UTC()
	d.HydratedAt = &ha
	if a.Objects != nil {
		if m, _, err := repoarchive.GetManifest(ctx, a.Objects, proj.ID); err == nil {
			d.Manifest = &ManifestStatus{Seq: m.Seq, Increments: len(m.Increments), IncrementBytes: m.IncrementBytes(),
				BaseSeq: m.Base.Seq, BaseBytes: m.Base.Bytes}
		}
	}
	return resp, nil
}
