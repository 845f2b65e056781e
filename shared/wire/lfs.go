package wire

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
)

// The git-lfs batch API (spec 4.3 "batch", 10.3) as both of its servers
// speak it: the API's /internal/projects/{id}/lfs/objects/batch (presigned
// storage URLs) and a metal host's relay for its guests (transfers through
// the host). Protocol: https://github.com/git-lfs/git-lfs/blob/main/docs/api/batch.md

// LFSMediaType is the content type of every batch request and answer.
const LFSMediaType = "application/vnd.git-lfs+json"

// Limits of a batch request.
const (
	// LFSMaxObjects bounds the objects of one batch request (git-lfs sends
	// at most 100 by default, lfs.transfer.batchSize).
	LFSMaxObjects = 1000
	// LFSMaxObjectBytes bounds one object: the single-PUT limit of S3.
	LFSMaxObjectBytes int64 = 5 << 30
)

// Operations of a batch request.
const (
	LFSUpload   = "upload"
	LFSDownload = "download"
)

// LFSBatchRequest is the body of a batch request.
type LFSBatchRequest struct {
	Operation string       `json:"operation"`
	Transfers []string     `json:"transfers,omitempty"`
	Ref       *LFSRef      `json:"ref,omitempty"`
	Objects   []LFSPointer `json:"objects"`
	HashAlgo  string       `json:"hash_algo,omitempty"`
}

// LFSRef is the optional ref of a batch request (ignored: one namespace per
// project).
type LFSRef struct {
	Name string `json:"name"`
}

// LFSPointer names one object.
type LFSPointer struct {
	OID  string `json:"oid"`
	Size int64  `json:"size"`
}

// LFSBatchResponse is the answer to a batch request.
type LFSBatchResponse struct {
	Transfer string      `json:"transfer"`
	Objects  []LFSObject `json:"objects"`
	HashAlgo string      `json:"hash_algo"`
}

// LFSObject is one object of the answer: actions, or an error, or neither
// (an upload the server already has).
type LFSObject struct {
	OID           string                `json:"oid"`
	Size          int64                 `json:"size"`
	Authenticated bool                  `json:"authenticated,omitempty"`
	Actions       map[string]*LFSAction `json:"actions,omitempty"`
	Error         *LFSObjectError       `json:"error,omitempty"`
}

// LFSAction is an href the client calls, with headers and a validity.
type LFSAction struct {
	Href      string            `json:"href"`
	Header    map[string]string `json:"header,omitempty"`
	ExpiresIn int               `json:"expires_in,omitempty"`
}

// LFSObjectError is a per-object error.
type LFSObjectError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

var lfsOIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidLFSOID reports whether oid is a sha256 in lowercase hex.
func ValidLFSOID(oid string) bool { return lfsOIDRE.MatchString(oid) }

// Check refuses a request the servers do not serve as a whole: an unknown
// operation, another hash algorithm or transfer adapter, no or too many
// objects. The coded error carries the status of the answer.
func (r *LFSBatchRequest) Check() *Error {
	switch {
	case r.Operation != LFSUpload && r.Operation != LFSDownload:
		return Coded(CodeInvalidOperation, fmt.Sprintf("operation must be %q or %q", LFSUpload, LFSDownload))
	case r.HashAlgo != "" && r.HashAlgo != "sha256":
		return Coded(CodeUnsupportedHashAlgo, "only sha256 is supported")
	case len(r.Transfers) > 0 && !slices.Contains(r.Transfers, "basic"):
		return Coded(CodeUnsupportedTransfer, "only the basic transfer adapter is supported")
	case len(r.Objects) == 0:
		return Coded(CodeNoObjects, "objects must not be empty")
	case len(r.Objects) > LFSMaxObjects:
		return Coded(CodeTooManyObjects, fmt.Sprintf("at most %d objects per batch request", LFSMaxObjects))
	}
	return nil
}

// Check is the per-object error of an invalid oid or size (422), or nil.
func (p LFSPointer) Check() *LFSObjectError {
	switch {
	case !ValidLFSOID(p.OID):
		return &LFSObjectError{Code: http.StatusUnprocessableEntity, Message: "oid must be a sha256 in lowercase hex (64 characters)"}
	case p.Size < 0 || p.Size > LFSMaxObjectBytes:
		return &LFSObjectError{Code: http.StatusUnprocessableEntity, Message: fmt.Sprintf("size must be between 0 and %d bytes", LFSMaxObjectBytes)}
	}
	return nil
}
