package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/pairing"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// PairingCreated is the answer of `pairing create`; Token is shown only here.
type PairingCreated struct {
	ID        string    `json:"id"`
	ProjectID string    `json:"projectId"`
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
}

// CreatePairing issues a pairing token for a project and pins the project to
// the paired machine that will use it: until that machine connects, webhook
// requests for the project are 503 instance_offline.
func CreatePairing(ctx context.Context, st *store.Store, projectID, name string) (PairingCreated, error) {
	tok := pairing.NewToken()
	row, err := st.CreatePairingToken(ctx, store.PairingToken{ProjectID: projectID,
		Credential: store.Credential{ID: tok.ID, Name: name, Prefix: tok.Display}, TokenHash: tok.Hash})
	if errors.Is(err, store.ErrNotFound) {
		return PairingCreated{}, fmt.Errorf("project %s not found", projectID)
	}
	if err != nil {
		return PairingCreated{}, err
	}
	return PairingCreated{ID: row.ID, ProjectID: row.ProjectID, Name: row.Name, Token: tok.Plain,
		Prefix: row.Prefix, CreatedAt: row.CreatedAt}, nil
}

func init() {
	register("pairing create", "--project P [--name N]  (prints the pairing token once; pins P to the paired machine)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		project, name := fs.String("project", "", ""), fs.String("name", "", "")
		if err := parse(fs, args, "project"); err != nil {
			return nil, err
		}
		return CreatePairing(ctx, env.Store, *project, *name)
	})
	registerOne("pairing revoke", "--id I  (unpins the project from that machine)", "id", func(ctx context.Context, env *Env, id string) (any, error) {
		return env.Store.RevokePairingToken(ctx, id)
	})
	registerOne("pairing list", "--project P", "project", func(ctx context.Context, env *Env, project string) (any, error) {
		ts, err := env.Store.ListPairingTokens(ctx, project)
		if err != nil {
			return nil, err
		}
		if ts == nil {
			ts = []store.PairingToken{}
		}
		return map[string]any{"projectId": project, "pairingTokens": ts}, nil
	})
	registerOne("runtime show", "--project P  (the runtime the project is pinned to)", "project", func(ctx context.Context, env *Env, project string) (any, error) {
		a, err := env.Store.GetRuntimeAssignment(ctx, project)
		if errors.Is(err, store.ErrNotFound) {
			return map[string]any{"projectId": project, "driver": ""}, nil
		}
		return a, err
	})
}
