package host

// Large files of guests (spec 10.3, 10.5): a guest's git-lfs calls the
// batch route at its lfs.url (the relay) as a pod calls the API's. The
// API's answer would carry presigned URLs of object storage, which a guest
// cannot reach (and must not: it holds no credentials), so the host answers
// the batch itself, with the same protocol, from its own store: upload and
// download hrefs point at its transfer endpoint (LFSTransferPath + oid),
// which streams to or from <projectId>/lfs/objects/<oid>. An upload is
// hashed on the host before it is stored, so a guest can only store an
// object under its own sha256, in its own project.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/runtimetoken"
	"github.com/svc-dev/svc/shared/wire"
)

// LFSTransferPath + oid is the relay's large-file transfer endpoint
// (GET: download, PUT: upload).
const LFSTransferPath = "/metal/lfs/objects/"

// isLFSBatch reports whether path is the project's batch route.
func isLFSBatch(path, projectID string) bool {
	return path == internalapi.ProjectURL("", projectID, internalapi.PathLFSBatch)
}

// batch answers the guest's git-lfs batch request (the protocol of the
// API's endpoint, spec 4.3) from the host's store: an upload of a stored
// object gets no actions, a missing one an upload to the transfer
// endpoint (which checks the hash itself, so no verify action); a download
// of a stored object gets a download from the transfer endpoint, a missing
// one a per-object 404. base is scheme://host as the guest called us.
func (t *lfsTransfer) batch(w http.ResponseWriter, r *http.Request, base string) {
	var req wire.LFSBatchRequest
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", wire.LFSMediaType)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if !t.authorized(r) {
		fail(http.StatusUnauthorized, "the project's runtime token is required")
		return
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "POST only")
		return
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		fail(http.StatusBadRequest, "not a git-lfs batch request: "+err.Error())
		return
	}
	if err := req.Check(); err != nil {
		fail(err.Status, err.Message)
		return
	}
	out := make([]wire.LFSObject, len(req.Objects))
	for i, p := range req.Objects {
		o := &out[i]
		o.OID, o.Size = p.OID, p.Size
		if o.Error = p.Check(); o.Error != nil {
			continue
		}
		info, err := t.store.Head(r.Context(), objstore.LFSKey(t.projectID, p.OID))
		exists := err == nil
		if err != nil && !errors.Is(err, objstore.ErrNotExist) {
			fail(http.StatusBadGateway, "object storage: "+err.Error())
			return
		}
		o.Authenticated = true
		href := &wire.LFSAction{Href: base + LFSTransferPath + p.OID, ExpiresIn: 3600,
			Header: map[string]string{"Authorization": "Bearer " + t.token}}
		switch {
		case req.Operation == wire.LFSUpload && exists && info.Size == p.Size:
			// stored: no actions, git-lfs skips it
		case req.Operation == wire.LFSUpload:
			o.Actions = map[string]*wire.LFSAction{wire.LFSUpload: href}
		case exists:
			o.Actions = map[string]*wire.LFSAction{wire.LFSDownload: href}
		default:
			o.Error = &wire.LFSObjectError{Code: http.StatusNotFound, Message: "Object does not exist"}
		}
	}
	w.Header().Set("Content-Type", wire.LFSMediaType)
	_ = json.NewEncoder(w).Encode(wire.LFSBatchResponse{Transfer: "basic", Objects: out, HashAlgo: "sha256"})
}

// lfsTransfer streams one project's large-file objects between a guest and
// the host's object store.
type lfsTransfer struct {
	store     objstore.Store
	projectID string
	// token is the project's runtime token: the batch request carries it
	// (git-lfs's per-URL header) and every transfer action hands it back as
	// its Authorization header, so no other local process can use the
	// relay's large-file routes.
	token  string
	tmpDir string
	log    *zap.Logger
	// observe is told "upload", "download" or "rejected".
	observe func(outcome string)
}

func (t *lfsTransfer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !t.authorized(r) {
		t.observe("rejected")
		hostError(w, r, "unauthorized", "the project's runtime token is required")
		return
	}
	oid := strings.TrimPrefix(r.URL.Path, LFSTransferPath)
	if !wire.ValidLFSOID(oid) {
		t.observe("rejected")
		hostError(w, r, "invalid_oid", "oid must be a sha256 in lowercase hex")
		return
	}
	key := objstore.LFSKey(t.projectID, oid)
	switch r.Method {
	case http.MethodGet:
		rc, info, err := t.store.Get(r.Context(), key)
		if errors.Is(err, objstore.ErrNotExist) {
			hostError(w, r, "object_not_found", "Object does not exist.")
			return
		}
		if err != nil {
			hostError(w, r, "storage_unavailable", err.Error())
			return
		}
		defer rc.Close()
		t.observe("download")
		w.Header().Set("Content-Type", "application/octet-stream")
		if info.Size >= 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
		}
		_, _ = io.Copy(w, rc)
	case http.MethodPut:
		if err := t.upload(r.Context(), key, oid, r); err != nil {
			t.observe("rejected")
			t.log.Warn("guest lfs upload refused", zap.String("projectId", t.projectID), zap.String("oid", oid), zap.Error(err))
			hostError(w, r, "upload_rejected", err.Error())
			return
		}
		t.observe("upload")
		w.WriteHeader(http.StatusOK)
	default:
		hostError(w, r, "method_not_allowed", "GET or PUT")
	}
}

// upload spools the body to a file while hashing it and stores it only if
// it hashes to oid.
func (t *lfsTransfer) upload(ctx context.Context, key, oid string, r *http.Request) error {
	f, err := os.CreateTemp(t.tmpDir, "lfs-upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r.Body, wire.LFSMaxObjectBytes+1))
	if err != nil {
		return err
	}
	if n > wire.LFSMaxObjectBytes {
		return errors.New("object too large")
	}
	if r.ContentLength >= 0 && n != r.ContentLength {
		return errors.New("short upload")
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != oid {
		return errors.New("the content's sha256 is " + sum + ", not the oid")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = t.store.Put(ctx, key, f, n, objstore.PutOptions{})
	return err
}

func (t *lfsTransfer) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && runtimetoken.Equal(t.token, got)
}
