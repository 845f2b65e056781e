package gitserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv"
	"github.com/svc-dev/svc/shared/wire"
)

// A dual_shadow push carrying an ownership epoch is accepted only when the
// project's ownership record holds that epoch (docs/sync-modes.md §11).
// Afterwards: a stale epoch got 409 (git prints "returned error: 409", the
// answer the pod fences on) and the durable object is unchanged; the
// current epoch and a push without the header are made durable.
func TestPushOfAPodThatLostTheProjectIsRefused(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	_, err := f.Store.SetSyncMode(ctx, f.Project.ID, syncmode.DualShadow)
	testenv.Must(t, err)
	rec, _ := json.Marshal(objstore.OwnerRecord{Epoch: 5, Pod: "current"})
	_, err = f.Objects.Put(ctx, objstore.OwnerKey(f.Project.ID), bytes.NewReader(rec), int64(len(rec)), objstore.PutOptions{})
	testenv.Must(t, err)
	c := newClient(t)
	dst := filepath.Join(t.TempDir(), "clone")
	c.must("", "clone", f.remote(f.RuntimeToken), dst)
	for i, tc := range []struct {
		name, epoch string
		refused     bool
	}{
		{"stale epoch", "4", true},
		{"current epoch", "5", false},
		{"no epoch (a pod from before the record)", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Must(t, os.WriteFile(filepath.Join(dst, "turn.txt"), []byte(fmt.Sprint(i)), 0o644))
			c.must(dst, "add", "-A")
			c.must(dst, "commit", "-q", "-m", tc.name)
			before, err := durableETag(ctx, f)
			testenv.Must(t, err)
			args := []string{"push", "origin", "main"}
			if tc.epoch != "" {
				args = append([]string{"-c", "http.extraHeader=" + wire.HeaderOwnerEpoch + ": " + tc.epoch}, args...)
			}
			out, err := c.run(dst, args...)
			after, herr := durableETag(ctx, f)
			testenv.Must(t, herr)
			if tc.refused {
				if err == nil || !strings.Contains(out, "returned error: 409") || after != before {
					t.Fatalf("push with a stale epoch: err %v, object changed %v:\n%s", err, after != before, out)
				}
				return
			}
			if err != nil || after == before {
				t.Fatalf("push: %v (object changed %v)\n%s", err, after != before, out)
			}
		})
	}
}
