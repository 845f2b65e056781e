package admin

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// key set-budget: an API key's own credit budget (issue 23 point 5;
// docs/gateway.md, "Budgets per API key"). The JSON key API and this
// command set the same row.

// KeyBudgetResult is the answer of key set-budget.
type KeyBudgetResult struct {
	KeyID      string `json:"keyId"`
	Window     string `json:"window,omitempty"`
	LimitMicro int64  `json:"limitMicro,omitempty"`
	Cleared    bool   `json:"cleared,omitempty"`
}

func init() {
	register("key set-budget", "--id K (--credits C --window daily|monthly|lifetime | --clear)", func(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (any, error) {
		id, credits, window := fs.String("id", "", ""), fs.String("credits", "", ""), fs.String("window", "", "")
		clear := fs.Bool("clear", false, "")
		if err := parse(fs, args, "id"); err != nil {
			return nil, err
		}
		if _, err := env.Store.GetAPIKey(ctx, *id); err != nil {
			return nil, fmt.Errorf("key %q: %w", *id, err)
		}
		if *clear {
			if *credits != "" || *window != "" {
				return nil, fmt.Errorf("%w: --clear takes no --credits or --window", ErrUsage)
			}
			return KeyBudgetResult{KeyID: *id, Cleared: true}, env.Store.ClearKeyBudget(ctx, *id)
		}
		switch *window {
		case store.BudgetDaily, store.BudgetMonthly, store.BudgetLifetime:
		default:
			return nil, fmt.Errorf("%w: --window must be daily, monthly or lifetime", ErrUsage)
		}
		c, err := strconv.ParseFloat(*credits, 64)
		if err != nil || math.IsNaN(c) || c < 0.000001 || c > 1e9 {
			return nil, fmt.Errorf("%w: --credits must be a number from 0.000001 to 1000000000", ErrUsage)
		}
		micro := int64(math.Round(c * 1e6))
		if err := env.Store.SetKeyBudget(ctx, *id, micro, *window); err != nil {
			return nil, err
		}
		return KeyBudgetResult{KeyID: *id, Window: *window, LimitMicro: micro}, nil
	})
}
