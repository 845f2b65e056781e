package repoarchive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/objstore"
)

// RepoManifestVersion is the format of RepoManifest this build writes and
// the newest it reads. A reader meeting a newer version refuses the
// project (ErrManifestVersion) instead of restoring the base alone, which
// could lag the durable state by the increments it cannot apply.
const RepoManifestVersion = 1

// maxRepoManifest bounds the manifest a reader accepts.
const maxRepoManifest = 1 << 20

// ErrManifestVersion is returned for a manifest of a newer format.
var ErrManifestVersion = errors.New("repoarchive: the durable manifest has a format this build cannot read; upgrade, or compact the project with the newer build first (docs/sync-modes.md §13.6)")

// RepoManifest is <projectId>/repo.git.manifest.json, the commit point of
// a project's durable .git: the base (repo.git.tar.gz, the compaction),
// the increments written since, and the refs. The refs are authoritative:
// increments carry objects only, and a reader writes refs and HEAD from
// here after applying the base and every listed increment.
type RepoManifest struct {
	Version      int    `json:"version"`
	Epoch        int64  `json:"epoch"` // owner epoch of the writer of this version
	Seq          int64  `json:"seq"`   // raised by every write
	ObjectFormat string `json:"objectFormat,omitempty"`
	// Head is the branch HEAD names (refs/heads/...).
	Head string            `json:"head"`
	Refs map[string]string `json:"refs"`
	// Base describes repo.git.tar.gz as the writer last wrote or saw it.
	// The base is only ever replaced by a superset, so a reader applies
	// every listed increment whatever version of the base it got.
	Base       BaseRef     `json:"base"`
	Increments []Increment `json:"increments,omitempty"`
	// Retired are increments no longer listed, kept until the owner
	// deletes them after a grace period (readers holding an older
	// manifest may still fetch them).
	Retired  []Retired `json:"retired,omitempty"`
	DepsHash string    `json:"depsHash,omitempty"`
	// HeadTurn is the turn number of HEAD's commit (its first-parent
	// depth; 0 is the seed), when the writer knew it: the parity check
	// compares the rows with the durable head.
	HeadTurn *int64 `json:"headTurn,omitempty"`
}

// BaseRef is the base as a manifest names it.
type BaseRef struct {
	ETag  string `json:"etag"`
	Epoch int64  `json:"epoch"`
	Seq   int64  `json:"seq"` // the manifest seq whose refs the base holds
	Bytes int64  `json:"bytes"`
	// Refs the base holds (nil: unknown), so the increments can be merged
	// into one without rewriting the base.
	Refs map[string]string `json:"refs,omitempty"`
	// LFS: the base carries .git/lfs (the large-file cache), written while
	// a large-file push was failing; the next persist after a successful
	// push rewrites the base without it (spec 10.3).
	LFS bool `json:"lfs,omitempty"`
	// Loose counts the loose objects the base holds: a base written from
	// the work repository (a project's first persist) keeps them loose, and
	// every cold start pays for each as a file; the next compaction packs
	// them into one pack.
	Loose int `json:"loose,omitempty"`
}

// Increment is one listed increment.
type Increment struct {
	Key    string `json:"key"`
	Epoch  int64  `json:"epoch"`
	Seq    int64  `json:"seq"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Level 0 is a persist's increment; level 1 merges level-0 ones and
	// records the refs it brings the state to, which the next merge
	// excludes.
	Level int               `json:"level,omitempty"`
	Refs  map[string]string `json:"refs,omitempty"`
}

// Retired is an increment dropped by a compaction.
type Retired struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// IncrementBytes is the sum of the listed increments' sizes.
func (m *RepoManifest) IncrementBytes() int64 {
	var n int64
	for _, inc := range m.Increments {
		n += inc.Bytes
	}
	return n
}

// Marshal encodes m.
func (m *RepoManifest) Marshal() []byte {
	b, _ := json.Marshal(m)
	return b
}

// ParseRepoManifest decodes and validates a manifest of projectID: every
// ref name and id, HEAD and every increment key is checked, so nothing a
// reader writes from it can leave .git or name another project's object.
func ParseRepoManifest(b []byte, projectID string) (RepoManifest, error) {
	var m RepoManifest
	if len(b) > maxRepoManifest {
		return m, fmt.Errorf("repoarchive: durable manifest of %d bytes exceeds %d", len(b), maxRepoManifest)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("repoarchive: durable manifest: %w", err)
	}
	if m.Version > RepoManifestVersion {
		return RepoManifest{}, fmt.Errorf("%w (version %d, this build reads %d)", ErrManifestVersion, m.Version, RepoManifestVersion)
	}
	if m.Version < 1 {
		return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest without a version")
	}
	idLen := 40
	switch m.ObjectFormat {
	case "", "sha1":
	case "sha256":
		idLen = 64
	default:
		return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest object format %q", m.ObjectFormat)
	}
	for name, id := range m.Refs {
		if !ValidRefName(name) {
			return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest ref name %q", name)
		}
		if len(id) != idLen || !isLowerHex(id) {
			return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest ref %s id %q", name, id)
		}
	}
	if m.Head != "" && (!strings.HasPrefix(m.Head, "refs/heads/") || !ValidRefName(m.Head)) {
		return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest HEAD %q", m.Head)
	}
	for name, id := range m.Base.Refs {
		if !ValidRefName(name) || len(id) != idLen || !isLowerHex(id) {
			return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest base ref %s %q", name, id)
		}
	}
	for _, inc := range m.Increments {
		if !strings.HasPrefix(inc.Key, projectID+"/repo.git.inc/") || strings.Contains(inc.Key[len(projectID)+1:], "..") {
			return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest increment key %q", inc.Key)
		}
		for name, id := range inc.Refs {
			if !ValidRefName(name) || len(id) != idLen || !isLowerHex(id) {
				return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest increment %s ref %s %q", inc.Key, name, id)
			}
		}
		if len(inc.SHA256) != 64 || !isLowerHex(inc.SHA256) {
			return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest increment %s sha256 %q", inc.Key, inc.SHA256)
		}
	}
	if !isLowerHex(m.DepsHash) {
		return RepoManifest{}, fmt.Errorf("repoarchive: durable manifest deps hash %q", m.DepsHash)
	}
	return m, nil
}

// ValidRefName is a conservative git-check-ref-format: refs/<a>/<b>...,
// printable ASCII without the characters git forbids, no "..", no
// component starting with "." or ending with ".lock".
func ValidRefName(name string) bool {
	if !strings.HasPrefix(name, "refs/") || strings.Contains(name, "..") || strings.Contains(name, "@{") ||
		strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".") || len(name) > 1024 {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) {
			return false
		}
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || strings.HasPrefix(seg, ".") || strings.HasSuffix(seg, ".lock") {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// SortedRefNames returns the ref names of refs in order.
func SortedRefNames(refs map[string]string) []string {
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// GetManifest reads and parses the manifest of projectID. A project
// without one (a legacy object, or nothing durable yet) returns
// objstore.ErrNotExist.
func GetManifest(ctx context.Context, st objstore.Store, projectID string) (*RepoManifest, objstore.ObjectInfo, error) {
	key := objstore.RepoManifestKey(projectID)
	rc, info, err := st.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxRepoManifest+1))
	if err != nil {
		return nil, info, fmt.Errorf("repoarchive: read %s: %w", key, err)
	}
	m, err := ParseRepoManifest(b, projectID)
	if err != nil {
		return nil, info, err
	}
	return &m, info, nil
}
