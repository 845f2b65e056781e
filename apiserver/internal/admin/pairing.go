package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

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

func (a *cli) pairingCommands() []*cobra.Command {
	var project, name, id string
	create := a.verb("create", "--project P [--name N]  (prints the pairing token once; pins P to the paired machine)", []string{"project"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			return CreatePairing(ctx, a.env.Store, project, name)
		})
	create.Flags().StringVar(&project, "project", "", "project id")
	create.Flags().StringVar(&name, "name", "", "name of the paired machine")
	revoke := a.verb("revoke", "--id I  (unpins the project from that machine)", []string{"id"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		return a.env.Store.RevokePairingToken(ctx, id)
	})
	revoke.Flags().StringVar(&id, "id", "", "pairing token id")
	list := a.verb("list", "--project P", []string{"project"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		ts, err := a.env.Store.ListPairingTokens(ctx, project)
		if err != nil {
			return nil, err
		}
		if ts == nil {
			ts = []store.PairingToken{}
		}
		return map[string]any{"projectId": project, "pairingTokens": ts}, nil
	})
	list.Flags().StringVar(&project, "project", "", "project id")
	return []*cobra.Command{noun("pairing", create, revoke, list)}
}

func (a *cli) runtimeCommands() []*cobra.Command {
	var project string
	show := a.verb("show", "--project P  (the runtime the project is pinned to)", []string{"project"}, func(ctx context.Context, _ *cobra.Command) (any, error) {
		r, err := a.env.Store.GetRuntimeAssignment(ctx, project)
		if errors.Is(err, store.ErrNotFound) {
			return map[string]any{"projectId": project, "driver": ""}, nil
		}
		return r, err
	})
	show.Flags().StringVar(&project, "project", "", "project id")
	return []*cobra.Command{noun("runtime", show)}
}
