// Package objstore is the one object-store interface of the service (spec 2.7,
// "Durable objects in object storage"). Two backends implement it: objstore/fs
// (a directory, the embedded default) and objstore/s3 (MinIO or any S3, through
// minio-go). Both pass the contract suite in objstore/objstoretest.
//
// Conditional writes are the fencing primitive of the pod (spec 10.1.1: the pod
// is the sole writer): a Put with IfNoneMatch "*" only creates, a Put with
// IfMatch only replaces the version whose ETag the writer last saw. A lost race
// returns ErrPreconditionFailed and writes nothing.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

var (
	// ErrNotExist is returned by Get, Head and Delete-with-condition when no
	// object has the key.
	ErrNotExist = errors.New("objstore: object does not exist")
	// ErrPreconditionFailed is returned by Put when IfMatch or IfNoneMatch
	// does not hold; nothing was written.
	ErrPreconditionFailed = errors.New("objstore: precondition failed")
	// ErrInvalidKey is returned for keys that are empty, absolute, contain
	// "..", backslashes or NUL bytes.
	ErrInvalidKey = errors.New("objstore: invalid key")
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string // opaque, without quotes; changes whenever the content changes
	LastModified time.Time
	ContentType  string
}

// PutOptions are the conditions and metadata of a Put.
type PutOptions struct {
	// IfMatch, when set, makes the Put succeed only if the current object has
	// this ETag.
	IfMatch string
	// IfNoneMatch "*" makes the Put succeed only if no object has the key.
	IfNoneMatch string
	ContentType string
}

// Store is a flat key space of immutable-once-written blobs. Keys use "/" as
// separator. Implementations are safe for concurrent use.
type Store interface {
	// Put stores the whole of r under key. size is the exact length, or -1
	// when unknown. A Put is atomic: readers see the old object or the new
	// one, never a part.
	Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error)
	// Get opens the object for reading; the caller closes it.
	Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// Head returns the object's metadata without its content.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes the object; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for each object whose key starts with prefix, in
	// lexical key order. An error from fn stops the walk and is returned.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	// PresignGet and PresignPut return URLs that let a client without
	// credentials read or write one key until expiry (used by the LFS
	// batch endpoint, spec 4.3).
	PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error)
	PresignPut(ctx context.Context, key string, expiry time.Duration) (string, error)
}

// ValidateKey reports whether key is a clean relative key: non-empty, no
// leading "/", no "." or ".." segments, no backslash or NUL, no empty segment.
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 || strings.HasPrefix(key, "/") ||
		strings.ContainsAny(key, "\\\x00") || path.Clean(key) != key {
		return ErrInvalidKey
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return ErrInvalidKey
		}
	}
	return nil
}

// Keys of spec 2.7, built in one place so no caller spells them by hand.

// RepoKey is the durable .git of a project: <projectId>/repo.git.tar.gz.
func RepoKey(projectID string) string { return projectID + "/repo.git.tar.gz" }

// SourceKey is the cold-start source tarball of a project.
func SourceKey(projectID string) string { return projectID + "/project-src.tar.gz" }

// DataKey is the writable-state archive of a micro-VM project.
func DataKey(projectID string) string { return projectID + "/project-data.tar.gz" }

// DepsKey is the content-addressed node_modules layer in the gzip form
// spec 2.7 names; pods read it and no longer write it (DepsKeyZstd).
func DepsKey(hash string) string { return "deps-" + hash + ".tar.gz" }

// DepsKeyZstd is the same layer compressed with zstd, the form pods write
// (docs/performance.md: it inflates in less than half the CPU of gzip).
func DepsKeyZstd(hash string) string { return "deps-" + hash + ".tar.zst" }

// AssetKey is one legacy offloaded large file.
func AssetKey(projectID, relpath string) string { return projectID + "/assets/" + relpath }

// OwnerKey is the ownership record of a project (docs/sync-modes.md §11):
// which pod may write the project's objects.
func OwnerKey(projectID string) string { return projectID + "/owner.json" }

// LFSKey is one large-file object, oid being its sha256.
func LFSKey(projectID, oid string) string { return projectID + "/lfs/objects/" + oid }

// RepoManifestKey is the durable pointer of a project's .git: which base
// (RepoKey) and which increments (RepoIncrementKey) hold it, and its refs.
// It is the fenced object and the commit point of every durability step
// (docs/sync-modes.md §13.1).
func RepoManifestKey(projectID string) string { return projectID + "/repo.git.manifest.json" }

// RepoIncrementPrefix is the key prefix of a project's increments.
func RepoIncrementPrefix(projectID string) string { return projectID + "/repo.git.inc/" }

// RepoIncrementKey is one immutable increment of a project's .git: a pack
// of the objects new since the previous durable tips. The writer's owner
// epoch in the key keeps two pods from ever writing the same key.
func RepoIncrementKey(projectID string, epoch, seq int64, packHash string) string {
	return fmt.Sprintf("%s%010d-%012d-%s.tar", RepoIncrementPrefix(projectID), epoch, seq, packHash)
}
