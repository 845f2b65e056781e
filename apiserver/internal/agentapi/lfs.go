package agentapi

// The large-file batch endpoint (spec 4.3 "batch", 2.7, 10.3): the git-lfs
// batch API, restricted to what the pod needs.
//
//	POST /internal/projects/{id}/lfs/objects/batch   (git-lfs appends /objects/batch to lfs.url)
//	POST /internal/projects/{id}/lfs/verify          (the verify action of an upload)
//
// The answer carries presigned URLs, so bytes flow between the pod and
// object storage directly, under <projectId>/lfs/objects/<oid> (oid =
// sha256 of the content):
//
//   - upload of an object that is already stored with the same size: no
//     actions (content-addressed dedup; git-lfs then skips it);
//   - upload of a missing object: an "upload" action (presigned PUT) and a
//     "verify" action (LFSVerify checks the stored size and the sha256 of
//     the stored bytes against the oid);
//   - download of a stored object: a "download" action (presigned GET);
//   - download of a missing object: a per-object error with code 404;
//   - an invalid oid (not 64 lowercase hex) or size (negative or above
//     wire.LFSMaxObjectBytes): a per-object error with code 422, and no URL
//     is signed for it.
//
// Errors of the whole request (bad JSON, unknown operation, too many
// objects, another hash algorithm) use the service's error envelope.
// Protocol: https://github.com/git-lfs/git-lfs/blob/main/docs/api/batch.md

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// LFS limits beyond wire's (wire.LFSMaxObjects, wire.LFSMaxObjectBytes).
const (
	// MaxLFSBodyBytes bounds a batch or verify request body.
	MaxLFSBodyBytes = 1 << 20
	// DefaultLFSExpiry is how long a presigned URL stays valid.
	DefaultLFSExpiry = time.Hour
	// headConcurrency bounds the object-store probes of one batch.
	headConcurrency = 16
)

func (a *API) lfsExpiry() time.Duration {
	if a.LFSExpiry > 0 {
		return a.LFSExpiry
	}
	return DefaultLFSExpiry
}

// LFSBatch answers a git-lfs batch request.
func (a *API) LFSBatch(c echo.Context) error {
	projectID := c.Param("id")
	var req wire.LFSBatchRequest
	if err := readJSON(c, MaxLFSBodyBytes, &req, "a git-lfs batch JSON document"); err != nil {
		return err
	}
	if err := req.Check(); err != nil {
		return err
	}
	verifyHref := internalapi.ProjectURL(requestBase(c), projectID, internalapi.PathLFSVerify)
	out := make([]wire.LFSObject, len(req.Objects))
	g, ctx := errgroup.WithContext(c.Request().Context())
	g.SetLimit(headConcurrency)
	for i, p := range req.Objects {
		out[i] = wire.LFSObject{OID: p.OID, Size: p.Size}
		if out[i].Error = p.Check(); out[i].Error != nil {
			continue
		}
		g.Go(func() error {
			key := objstore.LFSKey(projectID, p.OID)
			info, err := a.Objects.Head(ctx, key)
			exists := err == nil
			if err != nil && !errors.Is(err, objstore.ErrNotExist) {
				return fmt.Errorf("lfs batch: head %s: %w", key, err)
			}
			o := &out[i]
			o.Authenticated = true
			secs := int(a.lfsExpiry() / time.Second)
			switch req.Operation {
			case wire.LFSUpload:
				if exists && info.Size == p.Size {
					return nil // already stored: no actions, git-lfs skips it
				}
				href, err := a.Objects.PresignPut(ctx, key, a.lfsExpiry())
				if err != nil {
					return err
				}
				o.Actions = map[string]*wire.LFSAction{
					"upload": {Href: href, ExpiresIn: secs},
					"verify": {Href: verifyHref, ExpiresIn: secs},
				}
			case wire.LFSDownload:
				if !exists {
					o.Error = &wire.LFSObjectError{Code: http.StatusNotFound, Message: "Object does not exist"}
					return nil
				}
				href, err := a.Objects.PresignGet(ctx, key, a.lfsExpiry())
				if err != nil {
					return err
				}
				o.Actions = map[string]*wire.LFSAction{"download": {Href: href, ExpiresIn: secs}}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return wire.Internal(err)
	}
	return writeLFS(c, http.StatusOK, wire.LFSBatchResponse{Transfer: "basic", Objects: out, HashAlgo: "sha256"})
}

// LFSVerify is the verify action: the object must be stored with the size the
// client uploaded.
func (a *API) LFSVerify(c echo.Context) error {
	projectID := c.Param("id")
	var p wire.LFSPointer
	if err := readJSON(c, MaxLFSBodyBytes, &p, "a git-lfs batch JSON document"); err != nil {
		return err
	}
	if !wire.ValidLFSOID(p.OID) || p.Size < 0 || p.Size > wire.LFSMaxObjectBytes {
		return wire.Coded("invalid_object", "oid must be 64 lowercase hex characters and size within limits")
	}
	key := objstore.LFSKey(projectID, p.OID)
	info, err := a.Objects.Head(c.Request().Context(), key)
	if errors.Is(err, objstore.ErrNotExist) {
		return wire.Coded("object_not_found", "Object does not exist.")
	}
	if err != nil {
		return wire.Internal(err)
	}
	if info.Size != p.Size {
		return wire.Coded("size_mismatch",
			fmt.Sprintf("stored object has %d bytes, expected %d", info.Size, p.Size))
	}
	// The key is the content's sha256: the stored bytes must hash to it.
	// A mismatch (a torn or forged upload) is deleted, so the next batch
	// asks for the upload again instead of deduplicating against it.
	sum, err := a.hashObject(c.Request().Context(), key)
	if err != nil {
		return wire.Internal(err)
	}
	if sum != p.OID {
		if derr := a.Objects.Delete(c.Request().Context(), key); derr != nil {
			return wire.Internal(derr)
		}
		a.log().Warn("lfs verify: stored bytes do not hash to their oid; object deleted",
			zap.String("projectId", projectID), zap.String("oid", p.OID), zap.String("sha256", sum))
		return wire.Coded("hash_mismatch",
			"stored object's sha256 is "+sum+", not its oid; upload it again")
	}
	return writeLFS(c, http.StatusOK, map[string]any{})
}

func (a *API) hashObject(ctx context.Context, key string) (string, error) {
	rc, _, err := a.Objects.Get(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeLFS(c echo.Context, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return wire.Internal(err)
	}
	return c.Blob(status, wire.LFSMediaType, b)
}

// requestBase is scheme://host as the caller reached us (the pod's lfs.url),
// so the verify href matches the per-URL header the pod configured.
func requestBase(c echo.Context) string {
	return c.Scheme() + "://" + c.Request().Host
}
