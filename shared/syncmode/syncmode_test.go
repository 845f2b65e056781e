package syncmode_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tabletest.CheckParse(t, "Parse", syncmode.Parse, map[string]syncmode.Mode{
		"":            syncmode.GitOnly,
		"git_only":    syncmode.GitOnly,
		"dual_shadow": syncmode.DualShadow,
		"s3":          syncmode.S3,
	}, "S3", "gitonly")
}

// Only the modes whose pods write project-src.tar.gz keep a source archive:
// reads and cold starts go to object storage for exactly these.
func TestKeepsSourceArchive(t *testing.T) {
	t.Parallel()
	for m, want := range map[syncmode.Mode]bool{syncmode.S3: true, syncmode.DualShadow: true, syncmode.GitOnly: false} {
		if got := m.KeepsSourceArchive(); got != want {
			t.Errorf("%s.KeepsSourceArchive() = %v, want %v", m, got, want)
		}
	}
}

// Only dual_shadow pushes to the API, and the table knows exactly the three
// modes.
func TestModeTable(t *testing.T) {
	t.Parallel()
	for m, want := range map[syncmode.Mode][2]bool{syncmode.S3: {false, false}, syncmode.DualShadow: {true, true}, syncmode.GitOnly: {false, true}} {
		if got := m.GitCheckpoints(); got != want[1] {
			t.Errorf("%s.GitCheckpoints() = %v, want %v", m, got, want[1])
		}
		if got := m.PushesToAPI(); got != want[0] {
			t.Errorf("%s.PushesToAPI() = %v, want %v", m, got, want[0])
		}
		if !m.Valid() {
			t.Errorf("%s.Valid() = false", m)
		}
	}
	for _, m := range []syncmode.Mode{"", "S3", "gitonly"} {
		if m.Valid() || m.KeepsSourceArchive() || m.PushesToAPI() || m.GitCheckpoints() {
			t.Errorf("%q is in the table", m)
		}
	}
}

// The API's traits: which modes take a pod's push, write checkpoint rows,
// keep a git history the API reads, and are cohort-guided.
func TestAPITraits(t *testing.T) {
	t.Parallel()
	type row struct{ push, rows, history, cohort bool }
	want := map[syncmode.Mode]row{
		syncmode.S3:         {},
		syncmode.DualShadow: {push: true, rows: true, history: true, cohort: true},
		syncmode.GitOnly:    {rows: true, history: true},
	}
	if len(syncmode.All) != len(want) {
		t.Fatalf("All = %v", syncmode.All)
	}
	for _, m := range syncmode.All {
		got := row{m.AcceptsPodPush(), m.GitCheckpoints(), m.GitCheckpoints(), m.CohortGuided()}
		if got != want[m] {
			t.Errorf("%s: %+v, want %+v", m, got, want[m])
		}
	}
}
