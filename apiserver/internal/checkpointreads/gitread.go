package checkpointreads

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/wire"
)

// Person is a commit author.
type Person struct {
	Name  string `json:"name"`
	Email string `json:"email"`
}

// Commit is one node of the graph.
type Commit struct {
	SHA         string    `json:"sha"`
	Parents     []string  `json:"parents"`
	Subject     string    `json:"subject"`
	Message     string    `json:"message"`
	Author      Person    `json:"author"`
	AuthoredAt  time.Time `json:"authoredAt"`
	CommittedAt time.Time `json:"committedAt"`
	Tags        []string  `json:"tags"`
	// Published is true when a publish/* tag points at the commit (the
	// Published badge of spec 6).
	Published bool `json:"published"`
}

// logFormat prints the fields of Commit, NUL-separated, records ended by RS.
const logFormat = "--format=%H%x00%P%x00%an%x00%ae%x00%aI%x00%cI%x00%B%x1e"

func parseLog(out []byte) ([]Commit, error) {
	var commits []Commit
	for _, rec := range bytes.Split(out, []byte{0x1e}) {
		rec = bytes.TrimLeft(rec, "\n")
		if len(rec) == 0 {
			continue
		}
		f := strings.SplitN(string(rec), "\x00", 7)
		if len(f) != 7 {
			return nil, errors.New("checkpointreads: unexpected git log output")
		}
		c := Commit{SHA: f[0], Parents: strings.Fields(f[1]), Author: Person{Name: f[2], Email: f[3]},
			Message: strings.TrimRight(f[6], "\n"), Tags: []string{}}
		if c.Parents == nil {
			c.Parents = []string{}
		}
		c.Subject, _, _ = strings.Cut(c.Message, "\n")
		c.AuthoredAt, _ = time.Parse(time.RFC3339, f[4])
		c.CommittedAt, _ = time.Parse(time.RFC3339, f[5])
		commits = append(commits, c)
	}
	return commits, nil
}

// tagMap maps commit sha → tag names (short), annotated tags peeled.
func tagMap(ctx context.Context, r *hydrate.Repo) (map[string][]string, error) {
	out, err := r.Git("for-each-ref", "--format=%(objectname)%00%(*objectname)%00%(refname:strip=2)", "refs/tags").
		String(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "\x00", 3)
		if len(f) != 3 {
			continue
		}
		sha := f[0]
		if f[1] != "" {
			sha = f[1]
		}
		m[sha] = append(m[sha], f[2])
	}
	return m, nil
}

func decorate(commits []Commit, tags map[string][]string) {
	for i := range commits {
		if t := tags[commits[i].SHA]; len(t) > 0 {
			commits[i].Tags = t
			for _, name := range t {
				if strings.HasPrefix(name, wire.PublishTagPrefix) {
					commits[i].Published = true
				}
			}
		}
	}
}

// errNoCommit: the revision does not name a commit of the repository.
var errNoCommit = errors.New("no such commit")

// resolve turns a validated revision into a full commit sha.
func resolve(ctx context.Context, r *hydrate.Repo, rev string) (string, error) {
	out, err := r.Git("rev-parse", "--verify", "-q", "--end-of-options").AddDynamic(rev + "^{commit}").String(ctx)
	if err != nil {
		if code := gitrun.ExitCode(err); code == 1 || code == 128 {
			return "", errNoCommit
		}
		return "", err
	}
	return out, nil
}

// resolveNamed is resolve for a revision the caller named: no such commit
// is a 404 commit_not_found with notFound as its message, any other failure
// a 500.
func resolveNamed(ctx context.Context, r *hydrate.Repo, rev, notFound string) (string, error) {
	sha, err := resolve(ctx, r, rev)
	if errors.Is(err, errNoCommit) {
		return "", wire.Coded("commit_not_found", notFound)
	}
	if err != nil {
		return "", wire.Internal(err)
	}
	return sha, nil
}

// headInfo returns HEAD's sha ("" when unborn) and branch ("" when
// detached).
func headInfo(ctx context.Context, r *hydrate.Repo) (sha, branch string, err error) {
	branch, _ = r.Git("symbolic-ref", "--short", "-q", "HEAD").String(ctx)
	sha, err = resolve(ctx, r, "HEAD")
	if errors.Is(err, errNoCommit) {
		return "", branch, nil
	}
	return sha, branch, err
}

// FileChange is one file of a commit.
type FileChange struct {
	Path      string `json:"path"`
	OldPath   string `json:"oldPath,omitempty"`
	Status    string `json:"status"` // added, modified, deleted, typechange
	Additions int    `json:"additions"`
	Deletions int    `json:"deletions"`
	Binary    bool   `json:"binary"`
}

// changedFiles diffs the commit against its first parent (the empty tree
// for a root commit).
func changedFiles(ctx context.Context, r *hydrate.Repo, sha, parent string, maxFiles int) ([]FileChange, bool, error) {
	cmd := r.Git("diff-tree", "-r", "--no-commit-id", "--no-renames", "--no-ext-diff", "--no-textconv", "--raw", "--numstat", "-z")
	if parent == "" {
		cmd.AddArgs("--root").AddDynamic(sha)
	} else {
		cmd.AddDynamic(parent, sha)
	}
	out, err := cmd.Output(ctx)
	if err != nil {
		return nil, false, err
	}
	fields := strings.Split(string(out), "\x00")
	var files []FileChange
	index := map[string]int{}
	i := 0
	// Raw entries: ":<modes and ids> <status>" then the path.
	for i < len(fields) && strings.HasPrefix(fields[i], ":") {
		meta := strings.Fields(fields[i])
		if i+1 >= len(fields) || len(meta) < 5 {
			return nil, false, fmt.Errorf("checkpointreads: unexpected diff-tree output")
		}
		fc := FileChange{Path: fields[i+1], Status: statusName(meta[4])}
		index[fc.Path] = len(files)
		files = append(files, fc)
		i += 2
	}
	// Numstat entries: "<added>\t<deleted>\t<path>".
	for ; i < len(fields); i++ {
		parts := strings.SplitN(fields[i], "\t", 3)
		if len(parts) != 3 {
			continue
		}
		j, ok := index[parts[2]]
		if !ok {
			continue
		}
		if parts[0] == "-" && parts[1] == "-" {
			files[j].Binary = true
			continue
		}
		files[j].Additions, _ = strconv.Atoi(parts[0])
		files[j].Deletions, _ = strconv.Atoi(parts[1])
	}
	truncated := false
	if maxFiles > 0 && len(files) > maxFiles {
		files, truncated = files[:maxFiles], true
	}
	return files, truncated, nil
}

// statusNames names the status letters of git's raw diff output; any other
// letter (M) is "modified".
var statusNames = map[byte]string{'A': "added", 'D': "deleted", 'T': "typechange"}

// statusName names a raw status field (never empty: strings.Fields).
func statusName(s string) string {
	if n, ok := statusNames[s[0]]; ok {
		return n
	}
	return "modified"
}

// capWriter keeps at most max bytes and then reports errCapped, which stops
// the git process feeding it.
type capWriter struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

var errCapped = errors.New("output cap reached")

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - w.buf.Len()
	if len(p) <= room {
		return w.buf.Write(p)
	}
	if room > 0 {
		w.buf.Write(p[:room])
	}
	w.truncated = true
	return 0, errCapped
}

// lineCollector reads rev-list output and keeps the limit shas after the
// cursor sha (all from the start when after is empty).
type lineCollector struct {
	after   string
	found   bool
	limit   int
	shas    []string
	partial []byte
	done    bool
}

var errCollected = errors.New("collected")

func (c *lineCollector) Write(p []byte) (int, error) {
	if c.done {
		return 0, errCollected
	}
	n := len(p)
	data := append(c.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := string(data[:i])
		data = data[i+1:]
		if !c.found {
			c.found = line == c.after
			continue
		}
		c.shas = append(c.shas, line)
		if len(c.shas) >= c.limit {
			c.done = true
			c.partial = nil
			return 0, errCollected
		}
	}
	c.partial = append([]byte(nil), data...)
	return n, nil
}
