package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
)

// HeaderOwnerEpoch carries the pushing pod's ownership epoch on its pushes
// to the API origin (dual_shadow): the API refuses a push whose epoch is
// not the one the project's ownership record holds (docs/sync-modes.md §11).
const HeaderOwnerEpoch = "X-Svc-Owner-Epoch"

// CodeFenced is the error code of a write refused because another pod owns
// the project (409).
const CodeFenced = "fenced"

// OwnerRecord is <projectId>/owner.json: the pod that may write the
// project's objects. Every pod claims it at start with a conditional PUT
// that raises Epoch by one; a pod whose epoch is no longer the record's is
// fenced.
type OwnerRecord struct {
	Epoch int64 `json:"epoch"`
	// Pod names the claimant (host name and process id), for operators.
	Pod string `json:"pod"`
	// Generation is the runtime driver's generation of the pod (0 when the
	// driver has none): a pod of an older generation never claims over a
	// newer one.
	Generation int64     `json:"generation,omitempty"`
	Claimed    time.Time `json:"claimed"`
}

// ReadOwnerRecord reads a project's ownership record and its ETag.
// objstore.ErrNotExist means no pod claimed the project yet.
func ReadOwnerRecord(ctx context.Context, s objstore.Store, projectID string) (OwnerRecord, string, error) {
	var rec OwnerRecord
	rc, info, err := s.Get(ctx, objstore.OwnerKey(projectID))
	if err != nil {
		return rec, "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 64<<10))
	if err != nil {
		return rec, "", err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, "", fmt.Errorf("wire: %s is not an ownership record: %w", objstore.OwnerKey(projectID), err)
	}
	return rec, info.ETag, nil
}
