package objstore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

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
// ErrNotExist means no pod claimed the project yet.
func ReadOwnerRecord(ctx context.Context, s Store, projectID string) (OwnerRecord, string, error) {
	var rec OwnerRecord
	rc, info, err := s.Get(ctx, OwnerKey(projectID))
	if err != nil {
		return rec, "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 64<<10))
	if err != nil {
		return rec, "", err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, "", fmt.Errorf("objstore: %s is not an ownership record: %w", OwnerKey(projectID), err)
	}
	return rec, info.ETag, nil
}
