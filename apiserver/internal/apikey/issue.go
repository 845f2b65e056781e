package apikey

import (
	"context"
	"fmt"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// Issued is a key just created: the plain key appears only here (the admin
// CLI's key create prints it, the console shows it once).
type Issued struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Prefix string `json:"prefix"`
}

// Issue mints a key for a member of the workspace and stores its hash; the
// console and the admin CLI both create keys through it. A user who is not
// a member gets an error and no key.
func Issue(ctx context.Context, st *store.Store, workspaceID, userID, name string) (Issued, error) {
	ok, err := st.IsMember(ctx, workspaceID, userID)
	if err != nil {
		return Issued{}, err
	}
	if !ok {
		return Issued{}, fmt.Errorf("user %s is not a member of workspace %s", userID, workspaceID)
	}
	k := New()
	if _, err := st.CreateAPIKey(ctx, store.APIKey{WorkspaceID: workspaceID, UserID: userID,
		Credential: store.Credential{ID: k.ID, Name: name, Prefix: k.Display}, KeyHash: k.Hash}); err != nil {
		return Issued{}, err
	}
	return Issued{ID: k.ID, Key: k.Plain, Prefix: k.Display}, nil
}
