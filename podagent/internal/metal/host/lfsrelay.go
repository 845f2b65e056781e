package host

// Large files of guests (spec 10.3, 10.5): a guest's git-lfs talks to the
// API's batch endpoint through the relay as a pod does, but the presigned
// URLs of the answer point at object storage, which a guest cannot reach
// (and must not: it holds no credentials). The relay therefore rewrites the
// answer: upload and download hrefs point at its own transfer endpoint
// (LFSTransferPath + oid), which streams to or from
// <projectId>/lfs/objects/<oid> with the host's store, and the verify href
// points back through the relay to the API's verify route. An upload is
// hashed on the host before it is stored, so a guest can only store an
// object under its own sha256, in its own project.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/objstore"
)

// LFSTransferPath + oid is the relay's large-file transfer endpoint
// (GET: download, PUT: upload).
const LFSTransferPath = "/metal/lfs/objects/"

// maxLFSObject bounds one upload (the API's batch limit, S3's single PUT).
const maxLFSObject = 5 << 30

// maxBatchAnswer bounds a batch answer the relay rewrites.
const maxBatchAnswer = 16 << 20

var oidRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

type lfsAction struct {
	Href      string            `json:"href"`
	Header    map[string]string `json:"header,omitempty"`
	ExpiresIn int               `json:"expires_in,omitempty"`
}

type guestBaseKey struct{}

// isLFSBatch reports whether path is the project's batch route.
func isLFSBatch(path, projectID string) bool {
	return path == internalapi.ProjectURL("", projectID, internalapi.PathLFSBatch)
}

// rewriteLFSBatch rewrites a 200 batch answer for the guest reached at base
// (scheme://host as the guest called the relay).
func rewriteLFSBatch(res *http.Response, base string) error {
	if res.StatusCode != http.StatusOK {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxBatchAnswer+1))
	res.Body.Close()
	if err != nil {
		return err
	}
	if len(body) > maxBatchAnswer {
		return errors.New("lfs batch answer too large")
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	var objects []map[string]json.RawMessage
	if raw, ok := doc["objects"]; ok {
		if err := json.Unmarshal(raw, &objects); err != nil {
			return err
		}
	}
	for _, o := range objects {
		raw, ok := o["actions"]
		if !ok {
			continue
		}
		var oid string
		if err := json.Unmarshal(o["oid"], &oid); err != nil || !oidRE.MatchString(oid) {
			delete(o, "actions") // the API answers such objects with an error, not actions
			continue
		}
		var actions map[string]*lfsAction
		if err := json.Unmarshal(raw, &actions); err != nil {
			return err
		}
		for name, a := range actions {
			switch name {
			case "upload", "download":
				a.Href, a.Header = base+LFSTransferPath+oid, nil
			case "verify":
				u, err := url.Parse(a.Href)
				if err != nil {
					return err
				}
				a.Href = base + u.EscapedPath()
			default:
				delete(actions, name)
			}
		}
		if o["actions"], err = json.Marshal(actions); err != nil {
			return err
		}
	}
	if doc["objects"], err = json.Marshal(objects); err != nil {
		return err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewReader(out))
	res.ContentLength = int64(len(out))
	res.Header.Set("Content-Length", strconv.Itoa(len(out)))
	res.Header.Del("Content-Encoding")
	return nil
}

// lfsTransfer streams one project's large-file objects between a guest and
// the host's object store.
type lfsTransfer struct {
	store     objstore.Store
	projectID string
	tmpDir    string
	log       *zap.Logger
	// observe is told "upload", "download" or "rejected".
	observe func(outcome string)
}

func (t *lfsTransfer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	oid := strings.TrimPrefix(r.URL.Path, LFSTransferPath)
	if !oidRE.MatchString(oid) {
		t.observe("rejected")
		writeError(w, http.StatusUnprocessableEntity, "invalid_oid", "oid must be a sha256 in lowercase hex")
		return
	}
	key := objstore.LFSKey(t.projectID, oid)
	switch r.Method {
	case http.MethodGet:
		rc, info, err := t.store.Get(r.Context(), key)
		if errors.Is(err, objstore.ErrNotExist) {
			writeError(w, http.StatusNotFound, "object_not_found", "Object does not exist.")
			return
		}
		if err != nil {
			writeError(w, http.StatusBadGateway, "storage_unavailable", err.Error())
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
			writeError(w, http.StatusUnprocessableEntity, "upload_rejected", err.Error())
			return
		}
		t.observe("upload")
		w.WriteHeader(http.StatusOK)
	default:
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET or PUT")
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
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r.Body, maxLFSObject+1))
	if err != nil {
		return err
	}
	if n > maxLFSObject {
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
