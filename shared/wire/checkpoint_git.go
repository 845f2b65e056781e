package wire

import (
	"strconv"
	"strings"
	"time"
)

// CommitFormat is the git log/show --format whose NUL-separated fields
// CheckpointFromGit reads: sha, parents, "author <email>", committer date
// (strict ISO 8601), message. The pod (recording a turn) and the API
// (reconciling on hydrate) both use it, so their rows describe a commit alike.
const CommitFormat = "%H%x00%P%x00%an <%ae>%x00%cI%x00%B"

// CheckpointFromGit builds the record of one commit from the five fields of
// CommitFormat and the commit's `--numstat` lines (binary files count as
// changed with no additions or deletions). Branch is left to the caller.
func CheckpointFromGit(fields [5]string, numstat string) CheckpointRecord {
	rec := CheckpointRecord{CommitSHA: fields[0],
		CommitSummary: CommitSummary{Author: fields[2], Message: strings.TrimRight(fields[4], "\n")}}
	if parents := strings.Fields(fields[1]); len(parents) > 0 {
		rec.ParentSHA = parents[0]
	}
	if t, err := time.Parse(time.RFC3339, fields[3]); err == nil {
		rec.CreatedAt = t.UTC()
	}
	for _, line := range strings.Split(numstat, "\n") {
		parts := strings.SplitN(line, "\t", 3)
		if len(parts) != 3 {
			continue
		}
		rec.FilesChanged++
		if a, err := strconv.Atoi(parts[0]); err == nil {
			rec.Additions += a
		}
		if d, err := strconv.Atoi(parts[1]); err == nil {
			rec.Deletions += d
		}
	}
	return rec
}
