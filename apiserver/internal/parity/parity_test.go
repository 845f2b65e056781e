package parity_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/admin"
	"github.com/svc-dev/svc/apiserver/internal/parity"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/objstore/fs"
	"github.com/svc-dev/svc/shared/repoarchive"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func sha(i int) string { return fmt.Sprintf("%040x", i) }

// Rows against turns: a gap is missing, two commits claiming one turn are a
// duplicate, the seed (turn 0) is not a turn, s3 projects are skipped; the
// admin command prints the JSON and exits non-zero on any mismatch.
func TestParityFindsMissingAndDuplicateTurns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		mode       syncmode.Mode
		turns      []int64 // one row per entry, commit sha(i)
		status     string
		missing    []int64
		duplicates []int64
	}{
		{"exact", syncmode.GitOnly, []int64{0, 1, 2, 3}, parity.StatusOK, nil, nil},
		{"exact dual_shadow", syncmode.DualShadow, []int64{1, 2}, parity.StatusOK, nil, nil},
		{"gap", syncmode.DualShadow, []int64{1, 2, 4, 5}, parity.StatusMismatch, []int64{3}, nil},
		{"duplicate", syncmode.GitOnly, []int64{1, 2, 2, 3}, parity.StatusMismatch, nil, []int64{2}},
		{"s3 skipped", syncmode.S3, []int64{1, 3}, parity.StatusSkipped, nil, nil},
		// A row without a turn number is a commit off the first-parent
		// line (a side ref, a tag): not a turn, so a mismatch.
		{"row that is not a turn", syncmode.GitOnly, []int64{1, -1, 2}, parity.StatusMismatch, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := storetest.Postgres(t)
			p := storetest.Projects(t, st, "p")[0]
			if _, err := st.SetSyncMode(ctx, p.ID, tc.mode); err != nil {
				t.Fatal(err)
			}
			for i, turn := range tc.turns {
				if _, _, err := st.RecordCheckpoint(ctx, p.ID, wire.CheckpointRecord{CommitSHA: sha(i + 1), Turn: turn}, store.SourcePod); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			err := admin.Run(ctx, &admin.Env{Store: st, Out: &out}, []string{"parity-check", "--project", p.ID})
			if (err != nil) != (tc.status == parity.StatusMismatch) || (err != nil && !errors.Is(err, parity.ErrMismatch)) {
				t.Fatalf("exit error %v for status %s", err, tc.status)
			}
			var rep parity.Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("not JSON: %s", out.String())
			}
			res := rep.Projects[0]
			if res.Status != tc.status || fmt.Sprint(res.Missing) != fmt.Sprint(tc.missing) {
				t.Fatalf("result %+v", res)
			}
			var dups []int64
			for _, d := range res.Duplicates {
				dups = append(dups, d.Turn)
			}
			var notTurns []string
			for i, turn := range tc.turns {
				if turn < 0 && tc.mode != syncmode.S3 {
					notTurns = append(notTurns, sha(i+1))
				}
			}
			if fmt.Sprint(res.NotTurns) != fmt.Sprint(notTurns) {
				t.Fatalf("notTurns %v, want %v", res.NotTurns, notTurns)
			}
			if fmt.Sprint(dups) != fmt.Sprint(tc.duplicates) {
				t.Fatalf("duplicates %v, want %v", res.Duplicates, tc.duplicates)
			}
			if (len(rep.Mismatches) > 0) != (tc.status == parity.StatusMismatch) || rep.OK != (tc.status != parity.StatusMismatch) {
				t.Fatalf("report %+v", rep)
			}
			if *rep.Checkpoints != len(tc.turns) {
				t.Fatalf("checkpoints %d, want %d", *rep.Checkpoints, len(tc.turns))
			}
		})
	}
}

// The rows are compared with the durable head: a git_only project whose
// last turn's row is missing (rows for the seed and turns 1–2, the
// manifest's head is turn 3) is a mismatch, and with the row it is ok.
func TestParityComparesRowsWithTheDurableHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.Postgres(t)
	p := storetest.Projects(t, st, "p")[0]
	if _, err := st.SetSyncMode(ctx, p.ID, syncmode.GitOnly); err != nil {
		t.Fatal(err)
	}
	for turn := int64(0); turn <= 2; turn++ {
		if _, _, err := st.RecordCheckpoint(ctx, p.ID, wire.CheckpointRecord{CommitSHA: sha(int(turn) + 1), Turn: turn}, store.SourcePod); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := fs.New(t.TempDir(), fs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	three := int64(3)
	m := repoarchive.RepoManifest{Version: repoarchive.RepoManifestVersion, Seq: 4, Head: "refs/heads/main",
		Refs: map[string]string{"refs/heads/main": sha(4)}, HeadTurn: &three}
	b := m.Marshal()
	if _, err := objs.Put(ctx, objstore.RepoManifestKey(p.ID), bytes.NewReader(b), int64(len(b)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c := &parity.Checker{Store: st, Objects: objs}
	rep, err := c.Run(ctx, p.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Projects[0]
	if res.Status != parity.StatusMismatch || fmt.Sprint(res.Missing) != "[3]" || res.DurableHead != sha(4) ||
		res.DurableHeadHasRow == nil || *res.DurableHeadHasRow {
		t.Fatalf("result %+v", res)
	}
	if _, _, err := st.RecordCheckpoint(ctx, p.ID, wire.CheckpointRecord{CommitSHA: sha(4), Turn: 3}, store.SourcePod); err != nil {
		t.Fatal(err)
	}
	if rep, err = c.Run(ctx, p.ID, time.Hour); err != nil || rep.Projects[0].Status != parity.StatusOK {
		t.Fatalf("with the head's row: %+v, %v", rep.Projects, err)
	}
}
