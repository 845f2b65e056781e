package console

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// Budgets per API key in the JSON key API
// (docs/gateway.md, "Budgets per API key"):
//
//	PUT    /api/workspaces/{ws}/keys/{keyId}/budget {"credits": 5, "window": "daily"}
//	GET    /api/workspaces/{ws}/keys/{keyId}/budget
//	DELETE /api/workspaces/{ws}/keys/{keyId}/budget
//
// KeysAPIAuth authorises them like the rest of the key API (owners change).

// maxBudgetCredits bounds a budget (its micro-credits stay far from
// overflowing the reservation arithmetic).
const maxBudgetCredits = 1e9

// BudgetJSON is a key's budget as the API shows it.
type BudgetJSON struct {
	Window     string     `json:"window"`
	LimitMicro int64      `json:"limitMicro"`
	UsedMicro  int64      `json:"usedMicro"`
	InFlight   int64      `json:"inFlight"`
	ResetsAt   *time.Time `json:"resetsAt,omitempty"`
}

func budgetJSON(b store.KeyBudget, now time.Time) BudgetJSON {
	out := BudgetJSON{Window: b.BudgetWindow, LimitMicro: b.LimitMicro, UsedMicro: b.UsedMicro(now)}
	if b.ReservedUntil > now.UnixMilli() {
		out.InFlight = b.Inflight
	}
	if b.BudgetWindow != store.BudgetLifetime && b.ResetsAt > now.UnixMilli() {
		t := time.UnixMilli(b.ResetsAt).UTC()
		out.ResetsAt = &t
	}
	return out
}

// budgetInput is the body of PUT …/budget (and the "budget" of a key
// creation): credits, or limitMicro, and the window.
type budgetInput struct {
	Credits    *float64 `json:"credits"`
	LimitMicro *int64   `json:"limitMicro"`
	Window     string   `json:"window"`
}

// limit validates in and returns its limit in micro-credits.
func (in budgetInput) limit() (int64, error) {
	switch in.Window {
	case store.BudgetDaily, store.BudgetMonthly, store.BudgetLifetime:
	default:
		return 0, wire.Coded("invalid_budget", `window must be "daily", "monthly" or "lifetime".`)
	}
	var micro int64
	switch {
	case in.Credits != nil && in.LimitMicro == nil:
		c := *in.Credits
		if math.IsNaN(c) || c <= 0 || c > maxBudgetCredits {
			return 0, wire.Coded("invalid_budget", "credits must be more than 0 and at most 1000000000.")
		}
		micro = int64(math.Round(c * 1e6))
	case in.LimitMicro != nil && in.Credits == nil:
		micro = *in.LimitMicro
		if micro <= 0 || micro > maxBudgetCredits*1e6 {
			return 0, wire.Coded("invalid_budget", "limitMicro must be more than 0 and at most 1000000000000000.")
		}
	default:
		return 0, wire.Coded("invalid_budget", `Give the limit as "credits" or as "limitMicro" (one of them).`)
	}
	if micro <= 0 {
		return 0, wire.Coded("invalid_budget", "credits must be at least 0.000001.")
	}
	return micro, nil
}

// workspaceKey loads keyID if it is a key of workspaceID.
func (c *Console) workspaceKey(ctx context.Context, workspaceID, keyID string) (store.APIKey, error) {
	k, err := c.o.Store.GetAPIKey(ctx, keyID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && k.WorkspaceID != workspaceID) {
		return store.APIKey{}, wire.Coded("key_not_found", "No such key in this workspace.")
	}
	if err != nil {
		return store.APIKey{}, wire.Internal(err)
	}
	return k, nil
}

// SetKeyBudgetJSON is PUT /api/workspaces/{ws}/keys/{keyId}/budget: 200
// with the budget as it stands. Changing only the limit keeps what the
// window used; changing the window starts a new one.
func (c *Console) SetKeyBudgetJSON(ec echo.Context) error {
	ctx := ec.Request().Context()
	k, err := c.workspaceKey(ctx, ec.Param("ws"), ec.Param("key"))
	if err != nil {
		return err
	}
	var in budgetInput
	if err := ec.Bind(&in); err != nil {
		return wire.Coded("invalid_body", `The body must be a JSON object like {"credits": 5, "window": "daily"}.`)
	}
	micro, err := in.limit()
	if err != nil {
		return err
	}
	if err := c.o.Store.SetKeyBudget(ctx, k.ID, micro, in.Window); err != nil {
		return wire.Internal(err)
	}
	return c.showBudget(ec, k.ID)
}

// GetKeyBudgetJSON is GET /api/workspaces/{ws}/keys/{keyId}/budget; 404
// key_budget_not_found when the key has none.
func (c *Console) GetKeyBudgetJSON(ec echo.Context) error {
	k, err := c.workspaceKey(ec.Request().Context(), ec.Param("ws"), ec.Param("key"))
	if err != nil {
		return err
	}
	return c.showBudget(ec, k.ID)
}

// DeleteKeyBudgetJSON is DELETE /api/workspaces/{ws}/keys/{keyId}/budget:
// 204; the key is then limited by its workspace's plan only.
func (c *Console) DeleteKeyBudgetJSON(ec echo.Context) error {
	ctx := ec.Request().Context()
	k, err := c.workspaceKey(ctx, ec.Param("ws"), ec.Param("key"))
	if err != nil {
		return err
	}
	if err := c.o.Store.ClearKeyBudget(ctx, k.ID); err != nil {
		return wire.Internal(err)
	}
	return ec.NoContent(http.StatusNoContent)
}

func (c *Console) showBudget(ec echo.Context, keyID string) error {
	b, err := c.o.Store.GetKeyBudget(ec.Request().Context(), keyID)
	if errors.Is(err, store.ErrNotFound) {
		return wire.Coded("key_budget_not_found", "This key has no budget.")
	}
	if err != nil {
		return wire.Internal(err)
	}
	return ec.JSON(http.StatusOK, budgetJSON(b, time.Now()))
}

// SetKeyBudgetForm is POST /console/w/{ws}/keys/{key}/budget (Settings ›
// API keys, owners): credits and window set the key's budget; empty
// credits remove it.
func (c *Console) SetKeyBudgetForm(ec echo.Context) error {
	p := newPage(ec, "API keys", "keys")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	ctx := ec.Request().Context()
	k, err := c.workspaceKey(ctx, p.WS.ID, ec.Param("key"))
	if err != nil {
		return c.errorPage(ec, http.StatusNotFound, "No such key.")
	}
	raw := strings.TrimSpace(ec.FormValue("credits"))
	if raw == "" {
		if err := c.o.Store.ClearKeyBudget(ctx, k.ID); err != nil {
			return err
		}
		return c.keysPage(ec, http.StatusOK, nil, "Key "+k.Prefix+" has no budget of its own now.", "")
	}
	v, perr := strconv.ParseFloat(raw, 64)
	in := budgetInput{Credits: &v, Window: ec.FormValue("window")}
	micro, err := in.limit()
	if perr != nil || err != nil {
		return c.keysPage(ec, http.StatusBadRequest, nil, "",
			"A budget is a number of credits (more than 0, at most 1000000000) and a window: daily, monthly or lifetime.")
	}
	if err := c.o.Store.SetKeyBudget(ctx, k.ID, micro, in.Window); err != nil {
		return err
	}
	return c.keysPage(ec, http.StatusOK, nil, "Budget of key "+k.Prefix+" set: "+credits(micro)+" credits "+in.Window+".", "")
}
