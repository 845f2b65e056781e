package hydratetest

import (
	"bytes"
	"context"
	"errors"

	"github.com/svc-dev/svc/shared/gitrun"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/repoarchive"
)

// PersistIncrement writes the work tree's .git as a pod does with a
// manifest: the first call the whole archive and a manifest naming it,
// each later call one increment of the objects new since the manifest's
// refs and the next manifest. It returns the manifest and the bytes of the
// increment (0 for the first call).
func (w *Work) PersistIncrement(st objstore.Store, projectID string) (repoarchive.RepoManifest, int64) {
	w.t.Helper()
	ctx := context.Background()
	refs, err := (&gitrun.Runner{}).Refs(ctx, w.GitDir())
	if err != nil {
		w.t.Fatal(err)
	}
	man, minfo, err := repoarchive.GetManifest(ctx, st, projectID)
	var n int64
	switch {
	case errors.Is(err, objstore.ErrNotExist):
		base := w.Persist(st, projectID)
		man = &repoarchive.RepoManifest{Base: repoarchive.BaseRef{ETag: base.ETag, Bytes: base.Size}}
	case err != nil:
		w.t.Fatal(err)
	default:
		var tips, old []string
		for _, id := range refs {
			tips = append(tips, id)
		}
		for _, id := range man.Refs {
			old = append(old, id)
		}
		pack, err := repoarchive.PackObjects(ctx, &gitrun.Runner{}, w.GitDir(), w.t.TempDir(), tips, old)
		if err != nil {
			w.t.Fatal(err)
		}
		var buf bytes.Buffer
		sum, size, err := repoarchive.WriteIncrement(&buf, pack)
		if err != nil {
			w.t.Fatal(err)
		}
		key := objstore.RepoIncrementKey(projectID, 1, man.Seq+1, pack.Hash)
		if _, err := st.Put(ctx, key, &buf, size, objstore.PutOptions{IfNoneMatch: "*"}); err != nil {
			w.t.Fatal(err)
		}
		man.Increments = append(man.Increments, repoarchive.Increment{Key: key, Epoch: 1, Seq: man.Seq + 1, Bytes: size, SHA256: sum})
		n = size
	}
	man.Version, man.Seq, man.Epoch = repoarchive.RepoManifestVersion, man.Seq+1, 1
	man.Refs, man.Head = refs, "refs/heads/main"
	b := man.Marshal()
	opts := objstore.PutOptions{IfMatch: minfo.ETag}
	if minfo.ETag == "" {
		opts = objstore.PutOptions{IfNoneMatch: "*"}
	}
	if _, err := st.Put(ctx, objstore.RepoManifestKey(projectID), bytes.NewReader(b), int64(len(b)), opts); err != nil {
		w.t.Fatal(err)
	}
	return *man, n
}
