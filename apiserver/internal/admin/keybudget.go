package admin

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// key set-budget: an API key's own credit budget
// (docs/gateway.md, "Budgets per API key"). The JSON key API and this
// command set the same row.

// KeyBudgetResult is the answer of key set-budget.
type KeyBudgetResult struct {
	KeyID      string `json:"keyId"`
	Window     string `json:"window,omitempty"`
	LimitMicro int64  `json:"limitMicro,omitempty"`
	Cleared    bool   `json:"cleared,omitempty"`
}

// keySetBudget is `key set-budget`, a verb of the key noun (key.go).
func (a *cli) keySetBudget() *cobra.Command {
	var id, credits, window string
	var clear bool
	c := a.verb("set-budget", "--id K (--credits C --window daily|monthly|lifetime | --clear)", []string{"id"},
		func(ctx context.Context, _ *cobra.Command) (any, error) {
			if _, err := a.env.Store.GetAPIKey(ctx, id); err != nil {
				return nil, fmt.Errorf("key %q: %w", id, err)
			}
			if clear {
				if credits != "" || window != "" {
					return nil, fmt.Errorf("%w: --clear takes no --credits or --window", ErrUsage)
				}
				return KeyBudgetResult{KeyID: id, Cleared: true}, a.env.Store.ClearKeyBudget(ctx, id)
			}
			switch window {
			case store.BudgetDaily, store.BudgetMonthly, store.BudgetLifetime:
			default:
				return nil, fmt.Errorf("%w: --window must be daily, monthly or lifetime", ErrUsage)
			}
			c, err := strconv.ParseFloat(credits, 64)
			if err != nil || math.IsNaN(c) || c < 0.000001 || c > 1e9 {
				return nil, fmt.Errorf("%w: --credits must be a number from 0.000001 to 1000000000", ErrUsage)
			}
			micro := int64(math.Round(c * 1e6))
			if err := a.env.Store.SetKeyBudget(ctx, id, micro, window); err != nil {
				return nil, err
			}
			return KeyBudgetResult{KeyID: id, Window: window, LimitMicro: micro}, nil
		})
	c.Flags().StringVar(&id, "id", "", "key id")
	c.Flags().StringVar(&credits, "credits", "", "credit limit of the window")
	c.Flags().StringVar(&window, "window", "", "daily, monthly or lifetime")
	c.Flags().BoolVar(&clear, "clear", false, "remove the key's budget")
	return c
}
