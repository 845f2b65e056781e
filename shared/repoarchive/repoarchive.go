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

// Options tune Create.
type Options struct {
	// IncludeLFS keeps .git/lfs (the large-file cache).
	IncludeLFS bool
	// Level is the gzip level; 0 means DefaultLevel.
	Level int
}

// Exclude reports whether the entry rel (slash-separated, relative to .git)
// stays out of the archive.
func Exclude(rel string, includeLFS bool) bool {
	switch {
	case rel == StateDirName, strings.HasSuffix(rel, ".lock"):
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
	return archive.CreateTarGz(w, gitDir, archive.CreateOptions{
		Level:       level,
		Exclude:     func(rel string, _ fs.DirEntry) bool { return Exclude(rel, opts.IncludeLFS) },
		MemberBytes: archive.DefaultMemberBytes, // readers inflate members in parallel
	})
}
