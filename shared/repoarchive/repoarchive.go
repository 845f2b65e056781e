// Package repoarchive is the layout of the durable repository object
// <projectId>/repo.git.tar.gz (spec 2.7, 10.1): a gzip tar of the contents
// of a project's .git (entry names relative to it: HEAD, objects/...,
// refs/...), without lock files, the pod's own state directory (svc-agent/),
// gc leftovers and, unless asked, the large-file cache (lfs/).
//
// The pod writes it (podagent/internal/durable) and the API reads it
// (apiserver/internal/hydrate); keeping the layout here lets both sides and
// their tests build the same object.
package repoarchive

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/svc-dev/svc/shared/archive"
)

// StateDirName is the pod's own directory inside .git; never archived.
const StateDirName = "svc-agent"

// DefaultLevel is the gzip level: git objects are already compressed, so
// the fastest level buys almost the same size.
const DefaultLevel = 1

// ManifestName is the archive's first entry when the pod writes one: a
// small JSON Manifest that travels with the durable object, in the same
// fenced PUT, so a cold start can act on it (start the deps layer's
// download) before the rest of .git has arrived. It is not a file of .git:
// the pod does not extract it, and Create never archives a file of that
// name from disk.
const ManifestName = "svc-manifest.json"

// maxManifest bounds the manifest a reader accepts.
const maxManifest = 64 << 10

// Lockfiles are the dependency lockfiles whose sha256 keys the deps layer
// (deps-<hash>.tar.gz), in the order they are looked for.
var Lockfiles = []string{"package-lock.json", "pnpm-lock.yaml", "yarn.lock", "bun.lockb", "bun.lock"}

// Manifest describes the durable object beyond .git itself.
type Manifest struct {
	// DepsHash is the key hash of the deps layer (deps-<hash>.tar.gz) of
	// HEAD: the sha256 of HEAD's lockfile; empty when HEAD has none.
	DepsHash string `json:"depsHash,omitempty"`
}

// ParseManifest decodes the manifest entry.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > maxManifest {
		return m, fmt.Errorf("repoarchive: manifest of %d bytes exceeds %d", len(b), maxManifest)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("repoarchive: manifest: %w", err)
	}
	for _, c := range m.DepsHash {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return Manifest{}, fmt.Errorf("repoarchive: manifest deps hash %q is not lowercase hex", m.DepsHash)
		}
	}
	return m, nil
}

// Options tune Create.
type Options struct {
	// IncludeLFS keeps .git/lfs (the large-file cache).
	IncludeLFS bool
	// Level is the gzip level; 0 means DefaultLevel.
	Level int
	// Manifest, when set, is written as the first entry (ManifestName).
	Manifest *Manifest
}

// Exclude reports whether the entry rel (slash-separated, relative to .git)
// stays out of the archive.
func Exclude(rel string, includeLFS bool) bool {
	switch {
	case rel == StateDirName, rel == ManifestName, strings.HasSuffix(rel, ".lock"):
		return true
	case rel == "lfs" && !includeLFS:
		return true
	case rel == "lfs/tmp", rel == "lfs/logs", rel == "lfs/incomplete":
		return true // git-lfs scratch space and error logs; only lfs/objects is the cache
	case rel == "gc.log", rel == "gc.pid":
		return true
	}
	return false
}

// Create writes the archive of gitDir (a .git directory) to w.
func Create(w io.Writer, gitDir string, opts Options) (archive.Stats, error) {
	level := opts.Level
	if level == 0 {
		level = DefaultLevel
	}
	copts := archive.CreateOptions{
		Level:       level,
		Exclude:     func(rel string, _ fs.DirEntry) bool { return Exclude(rel, opts.IncludeLFS) },
		MemberBytes: archive.DefaultMemberBytes, // readers inflate members in parallel
	}
	if opts.Manifest != nil {
		b, err := json.Marshal(opts.Manifest)
		if err != nil {
			return archive.Stats{}, err
		}
		copts.Leading = []archive.LeadingFile{{Name: ManifestName, Data: b}}
	}
	return archive.CreateTarGz(w, gitDir, copts)
}
