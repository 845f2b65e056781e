package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// GetRuntimeAssignments reads many projects' assignments in batches (the
// idle reaper's pass): each assigned project once, with what
// GetRuntimeAssignment reads, and no key for a project without one.
func TestGetRuntimeAssignments(t *testing.T) {
	t.Parallel()
	eachProject(t, "a", func(ctx context.Context, t *testing.T, s *store.Store, a store.Project) {
		b, err := s.CreateProject(ctx, a.WorkspaceID, "b")
		if err != nil {
			t.Fatal(err)
		}
		bare, err := s.CreateProject(ctx, a.WorkspaceID, "bare") // no assignment
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimRuntime(ctx, a.ID, "kubernetes", "git_only"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReserveRuntimeInstance(ctx, a.ID, "kubernetes", 1, "svc-rt-a-g1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AdvanceRuntime(ctx, a.ID, "kubernetes", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PinRuntime(ctx, store.RuntimeAssignment{ProjectID: b.ID, Driver: "local", Endpoint: "http://127.0.0.1:1", Instance: "api_a"}); err != nil {
			t.Fatal(err)
		}
		// ids beyond one batch: the assigned projects at its edges and
		// past them, unknown ids between.
		many := func(at map[int]string, n int) []string {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("prj_missing%04d", i)
				if id, ok := at[i]; ok {
					ids[i] = id
				}
			}
			return ids
		}
		for _, tc := range []struct {
			name string
			ids  []string
			want []string // projects with a key
		}{
			{"none", nil, nil},
			{"one without an assignment", []string{bare.ID}, nil},
			{"mixed", []string{a.ID, bare.ID, b.ID}, []string{a.ID, b.ID}},
			{"duplicates", []string{b.ID, b.ID, a.ID, b.ID}, []string{a.ID, b.ID}},
			{"across batches", many(map[int]string{0: bare.ID, 499: a.ID, 500: b.ID}, 1201), []string{a.ID, b.ID}},
			{"the last batch", many(map[int]string{1200: a.ID}, 1201), []string{a.ID}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.GetRuntimeAssignments(ctx, tc.ids)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("%d assignments, want %d: %+v", len(got), len(tc.want), got)
				}
				for _, id := range tc.want {
					one, err := s.GetRuntimeAssignment(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					g, ok := got[id]
					if !ok || g.Driver != one.Driver || g.Generation != one.Generation || g.Instance != one.Instance ||
						g.Endpoint != one.Endpoint || g.CloudSyncMode != one.CloudSyncMode || !g.UpdatedAt.Equal(one.UpdatedAt) {
						t.Errorf("%s: %+v, want %+v", id, g, one)
					}
				}
				if _, ok := got[bare.ID]; ok {
					t.Errorf("a project without an assignment has a key")
				}
			})
		}
	})
}
