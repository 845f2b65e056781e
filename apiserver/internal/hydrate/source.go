package hydrate

import (
	"bufio"
	"context"
	"errors"

	"github.com/klauspost/compress/gzip"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// The s3 mode's read source (docs/sync-modes.md §5): the status reads and
// the parity check both ask which commit <projectId>/project-src.tar.gz was
// taken at.

// SourceStatus describes <projectId>/project-src.tar.gz.
type SourceStatus struct {
	Exists bool   `json:"exists"`
	ETag   string `json:"etag,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Head is the commit the archive was taken at ("" if not recorded).
	Head string `json:"head,omitempty"`
}

// SourceHead reads the head recorded in project-src.tar.gz (its gzip
// comment) from the first bytes of the object.
func SourceHead(ctx context.Context, objs objstore.Store, projectID string) (SourceStatus, error) {
	rc, info, err := objs.Get(ctx, objstore.SourceKey(projectID))
	if errors.Is(err, objstore.ErrNotExist) {
		return SourceStatus{}, nil
	}
	if err != nil {
		return SourceStatus{}, err
	}
	defer rc.Close()
	st := SourceStatus{Exists: true, ETag: info.ETag, Size: info.Size}
	zr, err := gzip.NewReader(bufio.NewReaderSize(rc, 4096))
	if err != nil {
		return st, nil // not ours to judge here; the head stays unknown
	}
	st.Head = wire.SourceHead(zr.Header.Comment)
	return st, nil
}
