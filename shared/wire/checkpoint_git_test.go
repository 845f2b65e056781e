package wire

import (
	"testing"
	"time"
)

func TestCheckpointFromGit(t *testing.T) {
	t.Parallel()
	rec := CheckpointFromGit([5]string{"abc", "p1 p2", "svc agent <a@b>", "2026-01-02T03:04:05+01:00", "turn 1\n\n"},
		"3\t1\tindex.html\n-\t-\tlogo.png\n\n10\t0\tsrc/a.js\n")
	want := CheckpointRecord{CommitSHA: "abc", ParentSHA: "p1",
		CommitSummary: CommitSummary{Author: "svc agent <a@b>", Message: "turn 1", FilesChanged: 3, Additions: 13, Deletions: 1},
		CreatedAt:     time.Date(2026, 1, 2, 2, 4, 5, 0, time.UTC)}
	if rec != want {
		t.Fatalf("got %+v\nwant %+v", rec, want)
	}
	if root := CheckpointFromGit([5]string{"abc", "", "a", "not a date", "m"}, ""); root.ParentSHA != "" || !root.CreatedAt.IsZero() || root.FilesChanged != 0 {
		t.Fatalf("root commit %+v", root)
	}
}
