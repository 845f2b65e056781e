package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/apikey"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// MaxKeyNameLen bounds a key's name.
const MaxKeyNameLen = 100

type keysData struct {
	Keys    []store.APIKey
	Created *apikey.Issued
	Owner   bool
	Base    string
	Budgets map[string]BudgetJSON // by key id; keys without a budget are absent
}

// KeysPage is GET /console/w/{ws}/keys (Settings › API keys).
func (c *Console) KeysPage(ec echo.Context) error {
	return c.keysPage(ec, http.StatusOK, nil, "", "")
}

func (c *Console) keysPage(ec echo.Context, status int, created *apikey.Issued, flash, errMsg string) error {
	p := newPage(ec, "API keys", "keys")
	keys, err := c.o.Store.ListAPIKeys(ec.Request().Context(), p.WS.ID)
	if err != nil {
		return err
	}
	// newest first
	for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
		keys[i], keys[j] = keys[j], keys[i]
	}
	rows, err := c.o.Store.KeyBudgets(ec.Request().Context(), p.WS.ID)
	if err != nil {
		return err
	}
	budgets := make(map[string]BudgetJSON, len(rows))
	now := time.Now()
	for id, b := range rows {
		budgets[id] = budgetJSON(b, now)
	}
	p.Flash, p.Error = flash, errMsg
	p.Data = keysData{Keys: keys, Created: created, Owner: isOwner(p), Base: c.baseURL(ec), Budgets: budgets}
	return c.render(ec, status, "keys", p)
}

// CreateKey is POST /console/w/{ws}/keys: the plain key is shown once, on
// the page this answers.
func (c *Console) CreateKey(ec echo.Context) error {
	p := newPage(ec, "API keys", "keys")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	name := strings.TrimSpace(ec.FormValue("name"))
	if len(name) > MaxKeyNameLen {
		return c.keysPage(ec, http.StatusBadRequest, nil, "", "The name is too long (at most 100 characters).")
	}
	k, err := apikey.Issue(ec.Request().Context(), c.o.Store, p.WS.ID, p.User.ID, name)
	if err != nil {
		return err
	}
	return c.keysPage(ec, http.StatusOK, &k, "", "")
}

// RevokeKey is POST /console/w/{ws}/keys/{key}/revoke.
func (c *Console) RevokeKey(ec echo.Context) error {
	p := newPage(ec, "API keys", "keys")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	k, err := c.revoke(ec, p.WS.ID, ec.Param("key"))
	if errors.Is(err, store.ErrNotFound) {
		return c.errorPage(ec, http.StatusNotFound, "No such key.")
	}
	if err != nil {
		return err
	}
	return c.keysPage(ec, http.StatusOK, nil, "Key "+k.Prefix+" revoked. Requests with it are refused within a second.", "")
}

func (c *Console) revoke(ec echo.Context, workspaceID, keyID string) (store.APIKey, error) {
	ctx := ec.Request().Context()
	k, err := c.o.Store.GetAPIKey(ctx, keyID)
	if err != nil {
		return store.APIKey{}, err
	}
	if k.WorkspaceID != workspaceID {
		return store.APIKey{}, store.ErrNotFound
	}
	return c.o.Store.RevokeAPIKey(ctx, keyID)
}

// The JSON key-management API: GET/POST /api/workspaces/{ws}/keys and
// DELETE /api/workspaces/{ws}/keys/{keyId}. KeysAPIAuth authorises it.

const keysCallerKey = "svc.console.keyscaller"

// KeysAPIAuth authorises the JSON key API: a bearer key of an owner of the
// workspace (the key must belong to that workspace), or a console session of
// a member (owner for changes) with the CSRF token in X-CSRF-Token for
// unsafe methods. Not a member: 404; a member but not an owner: 403.
func (c *Console) KeysAPIAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		ctx := ec.Request().Context()
		ws := ec.Param("ws")
		var userID string
		if h := ec.Request().Header.Get("Authorization"); h != "" {
			pr, err := c.o.Auth.APIKey(ctx, auth.Bearer(h))
			if err != nil {
				return err
			}
			if pr.WorkspaceID != ws {
				return wire.Coded("workspace_not_found", "No such workspace.")
			}
			userID = pr.UserID
		} else {
			s, ok, err := c.loadSession(ctx, ec.Request())
			if err != nil {
				return wire.Unavailable(err)
			}
			if !ok {
				return wire.Coded("unauthenticated",
					"Sign in to the console or pass an owner's API key as 'Authorization: Bearer <key>'.")
			}
			if unsafeMethod(ec.Request().Method) && !c.csrfOK(ec, s.row.CSRFToken) {
				return wire.Coded("csrf_failed", "Missing or wrong X-CSRF-Token header.")
			}
			userID = s.user.ID
		}
		m, err := c.o.Store.GetMembership(ctx, ws, userID)
		if errors.Is(err, store.ErrNotFound) {
			return wire.Coded("workspace_not_found", "No such workspace.")
		}
		if err != nil {
			return wire.Unavailable(err)
		}
		// Reading the list is open to members signed in to the console;
		// keys act for automation, so a key must be an owner's for any call.
		if m.Role != store.RoleOwner && (unsafeMethod(ec.Request().Method) || ec.Request().Header.Get("Authorization") != "") {
			return wire.Coded("owner_required", "Only owners of the workspace manage its API keys.")
		}
		ec.Set(keysCallerKey, userID)
		return next(ec)
	}
}

// ListKeysJSON is GET /api/workspaces/{ws}/keys.
func (c *Console) ListKeysJSON(ec echo.Context) error {
	keys, err := c.o.Store.ListAPIKeys(ec.Request().Context(), ec.Param("ws"))
	if err != nil {
		return wire.Internal(err)
	}
	if keys == nil {
		keys = []store.APIKey{}
	}
	return ec.JSON(http.StatusOK, map[string]any{"keys": keys})
}

// CreateKeyJSON is POST /api/workspaces/{ws}/keys {name}: 201 {id, key,
// prefix, name}; the plain key appears only in this answer.
func (c *Console) CreateKeyJSON(ec echo.Context) error {
	var body struct {
		Name string `json:"name"`
	}
	if ec.Request().ContentLength != 0 {
		if err := ec.Bind(&body); err != nil {
			return wire.Coded("invalid_body", "The body must be a JSON object like {\"name\": \"ci\"}.")
		}
	}
	body.Name = strings.TrimSpace(body.Name)
	if len(body.Name) > MaxKeyNameLen {
		return wire.Coded("invalid_name", "name must have at most 100 characters.")
	}
	k, err := apikey.Issue(ec.Request().Context(), c.o.Store, ec.Param("ws"), ec.Get(keysCallerKey).(string), body.Name)
	if err != nil {
		return wire.Internal(err)
	}
	return ec.JSON(http.StatusCreated, map[string]any{"id": k.ID, "key": k.Key, "prefix": k.Prefix, "name": body.Name})
}

// RevokeKeyJSON is DELETE /api/workspaces/{ws}/keys/{keyId}: 200 with the
// revoked key; revoking twice keeps the first time.
func (c *Console) RevokeKeyJSON(ec echo.Context) error {
	k, err := c.revoke(ec, ec.Param("ws"), ec.Param("key"))
	if errors.Is(err, store.ErrNotFound) {
		return wire.Coded("key_not_found", "No such key in this workspace.")
	}
	if err != nil {
		return wire.Internal(err)
	}
	return ec.JSON(http.StatusOK, k)
}
