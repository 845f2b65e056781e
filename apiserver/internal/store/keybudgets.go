package store

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/migrations"
)

// The windows of a key budget (docs/gateway.md, "Budgets
// per API key"): daily and monthly reset at 00:00 UTC (monthly on the 1st),
// lifetime never.
const (
	BudgetDaily    = "daily"
	BudgetMonthly  = "monthly"
	BudgetLifetime = "lifetime"
)

// KeyBudget is an API key's credit budget and where it stands. ResetsAt is
// unix ms (0: lifetime, or no request yet in a daily/monthly window).
type KeyBudget struct {
	KeyID           string `gorm:"primaryKey"`
	LimitMicro      int64
	BudgetWindow    string
	ResetsAt        int64
	CreditsMicro    int64
	Inflight        int64
	ReservedUntil   int64
	MaxRequestMicro int64
	// LeasedMicro: credits leased by replicas (budget leases) and not yet
	// spent or returned; they lapse at LeasedUntil.
	LeasedMicro int64
	LeasedUntil int64
}

// TableName is the table of KeyBudget.
func (KeyBudget) TableName() string { return "key_budgets" }

// UsedMicro is the credits used in the window open at now (a closed
// window counts as none used).
func (b KeyBudget) UsedMicro(now time.Time) int64 {
	if b.BudgetWindow != BudgetLifetime && b.ResetsAt <= now.UnixMilli() {
		return 0
	}
	return b.CreditsMicro
}

// BudgetClock is what the budget statements need of the time: now, and the
// end of the daily and monthly windows open at now (unix ms); Until is
// when the reservations taken now lapse if never settled (a crashed
// replica's).
type BudgetClock struct {
	Now, Day, Month, Until int64
}

// The SQL of a budget row as seen at @now: the window's credits (0 once it
// closed), the reservations in flight (0 once they lapsed) and the end of
// the window open at @now.
const (
	budgetCredits  = `(CASE WHEN budget_window <> 'lifetime' AND resets_at <= @now THEN 0 ELSE credits_micro END)`
	budgetInflight = `(CASE WHEN reserved_until <= @now THEN 0 ELSE inflight END)`
	budgetResets   = `(CASE WHEN budget_window = 'lifetime' THEN 0 WHEN resets_at > @now THEN resets_at WHEN budget_window = 'daily' THEN @day ELSE @month END)`
	budgetLeased   = `(CASE WHEN leased_until <= @now OR (budget_window <> 'lifetime' AND resets_at <= @now) THEN 0 ELSE leased_micro END)`
	budgetColumns  = `key_id, limit_micro, budget_window, resets_at, credits_micro, inflight, reserved_until, max_request_micro, leased_micro, leased_until`
)

// SetKeyBudget sets (or replaces) a key's budget. Changing only the limit
// keeps what the window used; changing the window starts a new one.
func (s *Store) SetKeyBudget(ctx context.Context, keyID string, limitMicro int64, window string) error {
	return s.db.WithContext(ctx).Exec(`INSERT INTO key_budgets (key_id, limit_micro, budget_window) VALUES (?, ?, ?)
ON CONFLICT (key_id) DO UPDATE SET limit_micro = excluded.limit_micro, budget_window = excluded.budget_window,
  credits_micro = CASE WHEN key_budgets.budget_window = excluded.budget_window THEN key_budgets.credits_micro ELSE 0 END,
  resets_at = CASE WHEN key_budgets.budget_window = excluded.budget_window THEN key_budgets.resets_at ELSE 0 END`,
		keyID, limitMicro, window).Error
}

// ClearKeyBudget removes a key's budget (none is not an error).
func (s *Store) ClearKeyBudget(ctx context.Context, keyID string) error {
	return s.db.WithContext(ctx).Exec(`DELETE FROM key_budgets WHERE key_id = ?`, keyID).Error
}

// GetKeyBudget loads a key's budget; ErrNotFound when it has none.
func (s *Store) GetKeyBudget(ctx context.Context, keyID string) (KeyBudget, error) {
	return first[KeyBudget](ctx, s.db, "key_id = ?", keyID)
}

// KeyBudgets loads the budgets of a workspace's keys, by key id.
func (s *Store) KeyBudgets(ctx context.Context, workspaceID string) (map[string]KeyBudget, error) {
	var rows []KeyBudget
	err := s.db.WithContext(ctx).Raw(`SELECT `+budgetColumns+` FROM key_budgets
WHERE key_id IN (SELECT id FROM api_keys WHERE workspace_id = ?)`, workspaceID).Scan(&rows).Error
	out := make(map[string]KeyBudget, len(rows))
	for _, r := range rows {
		out[r.KeyID] = r
	}
	return out, err
}

// ReserveKeyBudget admits one request against a key's budget in one
// conditional UPDATE (atomic on both databases: PostgreSQL re-checks the
// condition on the row it waited for). A request is admitted when the
// window's credits are under the limit and either nothing else is in
// flight, or the credits plus every reservation (this one included), each
// at the largest cost one request has had, stay within the limit; so all
// requests in flight together pass the limit by at most one request.
// Credits leased by replicas (LeaseKeyBudget) count as spent here.
// ok false: refused, and b is the row as it stands (b.KeyID empty: the key
// has no budget, and nothing is reserved).
func (s *Store) ReserveKeyBudget(ctx context.Context, keyID string, c BudgetClock) (b KeyBudget, ok bool, err error) {
	err = s.sqlDB.QueryRowContext(ctx, reserveKeyBudgetSQL.of(s.dialect), reserveKeyBudgetSQL.args(budgetArgs{key: keyID}, c)...).Scan(
		&b.KeyID, &b.LimitMicro, &b.BudgetWindow, &b.ResetsAt, &b.CreditsMicro, &b.Inflight, &b.ReservedUntil, &b.MaxRequestMicro,
		&b.LeasedMicro, &b.LeasedUntil)
	if err == nil {
		return b, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return KeyBudget{}, false, err
	}
	b, err = s.GetKeyBudget(ctx, keyID)
	if errors.Is(err, ErrNotFound) {
		return KeyBudget{}, false, nil
	}
	return b, false, err
}

// AddKeyBudgetCost adds the cost of a request admitted without a
// reservation (while the database was down) to the window open at c.Now.
func (s *Store) AddKeyBudgetCost(ctx context.Context, keyID string, costMicro int64, c BudgetClock) error {
	_, err := s.sqlDB.ExecContext(ctx, addKeyBudgetCostSQL.of(s.dialect), addKeyBudgetCostSQL.args(budgetArgs{key: keyID, cost: costMicro}, c)...)
	return err
}

// SettleKeyBudget ends one reservation of a key's budget: the request's
// cost is added to the window open at c.Now and the reservation released.
func (s *Store) SettleKeyBudget(ctx context.Context, keyID string, costMicro int64, c BudgetClock) error {
	return s.SettleKeyBudgets(ctx, keyID, 1, costMicro, costMicro, c)
}

// LeaseKeyBudget leases n credits of a key's budget for one replica in one
// conditional UPDATE: granted only when the window's credits, every lease
// not yet spent or returned, every reservation in flight (at the largest
// cost one request has had) and n stay within the limit, so the leases of
// all replicas together never exceed what is left. ok false: refused, and
// b is the row as it stands (b.KeyID empty: the key has no budget).
func (s *Store) LeaseKeyBudget(ctx context.Context, keyID string, n int64, c BudgetClock) (b KeyBudget, ok bool, err error) {
	err = s.sqlDB.QueryRowContext(ctx, leaseKeyBudgetSQL.of(s.dialect), leaseKeyBudgetSQL.args(budgetArgs{key: keyID, cost: n}, c)...).Scan(
		&b.KeyID, &b.LimitMicro, &b.BudgetWindow, &b.ResetsAt, &b.CreditsMicro, &b.Inflight, &b.ReservedUntil, &b.MaxRequestMicro,
		&b.LeasedMicro, &b.LeasedUntil)
	if err == nil {
		return b, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return KeyBudget{}, false, err
	}
	b, err = s.GetKeyBudget(ctx, keyID)
	if errors.Is(err, ErrNotFound) {
		return KeyBudget{}, false, nil
	}
	return b, false, err
}

// SettleLeasedKeyBudget writes the settlements of requests admitted from a
// replica's lease: their costs (costMicro in all, maxCostMicro the largest)
// are added to the window open at c.Now, and leasedMicro of the leases are
// released (what those costs used of them), only while the leases still
// belong to the window that ends at resetsAt (a lease of a window that
// closed is gone already).
func (s *Store) SettleLeasedKeyBudget(ctx context.Context, keyID string, costMicro, maxCostMicro, leasedMicro, resetsAt int64, c BudgetClock) error {
	_, err := s.sqlDB.ExecContext(ctx, settleLeasedKeyBudgetSQL.of(s.dialect),
		settleLeasedKeyBudgetSQL.args(budgetArgs{key: keyID, cost: costMicro, max: maxCostMicro, n: leasedMicro, resets: resetsAt}, c)...)
	return err
}

// ReturnKeyBudgetLease gives back n leased credits of a key's budget that
// a replica did not use (the lease belonging to the window that ends at
// resetsAt; nothing when that window closed).
func (s *Store) ReturnKeyBudgetLease(ctx context.Context, keyID string, n, resetsAt int64, c BudgetClock) error {
	return s.SettleLeasedKeyBudget(ctx, keyID, 0, 0, n, resetsAt, c)
}

// SettleKeyBudgets ends n reservations of a key's budget in one statement:
// their costs (costMicro in all, maxCostMicro the largest) are added to the
// window open at c.Now and the reservations released.
func (s *Store) SettleKeyBudgets(ctx context.Context, keyID string, n, costMicro, maxCostMicro int64, c BudgetClock) error {
	_, err := s.sqlDB.ExecContext(ctx, settleKeyBudgetSQL.of(s.dialect),
		settleKeyBudgetSQL.args(budgetArgs{key: keyID, cost: costMicro, n: n, max: maxCostMicro}, c)...)
	return err
}

// The budget statements run on every request of a key with a budget (a
// reservation before the upstream, a settlement after): their SQL is built
// once, with numbered parameters, and sent straight to database/sql (the
// driver caches the prepared statement), rather than rebuilt by the ORM
// from named parameters each time.
var (
	reserveKeyBudgetSQL = budgetStatement(`UPDATE key_budgets SET credits_micro = ` + budgetCredits + `,
  inflight = ` + budgetInflight + ` + 1, resets_at = ` + budgetResets + `, reserved_until = @until
WHERE key_id = @key AND ` + budgetCredits + ` + ` + budgetLeased + ` < limit_micro AND (` + budgetInflight + ` = 0
  OR (max_request_micro > 0 AND ` + budgetCredits + ` + ` + budgetLeased + ` + (` + budgetInflight + ` + 1) * max_request_micro <= limit_micro))
RETURNING ` + budgetColumns)
	addKeyBudgetCostSQL = budgetStatement(`UPDATE key_budgets SET credits_micro = ` + budgetCredits + ` + @cost,
  resets_at = ` + budgetResets + `,
  max_request_micro = CASE WHEN @cost > max_request_micro THEN @cost ELSE max_request_micro END
WHERE key_id = @key`)
	leaseKeyBudgetSQL = budgetStatement(`UPDATE key_budgets SET credits_micro = ` + budgetCredits + `,
  leased_micro = ` + budgetLeased + ` + @cost, leased_until = @until, resets_at = ` + budgetResets + `
WHERE key_id = @key AND ` + budgetCredits + ` + ` + budgetLeased + ` + ` + budgetInflight + ` * max_request_micro + @cost <= limit_micro
RETURNING ` + budgetColumns)
	settleLeasedKeyBudgetSQL = budgetStatement(`UPDATE key_budgets SET credits_micro = ` + budgetCredits + ` + @cost,
  leased_micro = CASE WHEN resets_at = @resets AND ` + budgetLeased + ` > @n THEN ` + budgetLeased + ` - @n
    WHEN resets_at = @resets THEN 0 ELSE ` + budgetLeased + ` END,
  resets_at = ` + budgetResets + `,
  max_request_micro = CASE WHEN @max > max_request_micro THEN @max ELSE max_request_micro END
WHERE key_id = @key`)
	settleKeyBudgetSQL = budgetStatement(`UPDATE key_budgets SET credits_micro = ` + budgetCredits + ` + @cost,
  resets_at = ` + budgetResets + `,
  inflight = CASE WHEN ` + budgetInflight + ` > @n THEN ` + budgetInflight + ` - @n ELSE 0 END,
  max_request_micro = CASE WHEN @max > max_request_micro THEN @max ELSE max_request_micro END
WHERE key_id = @key`)
)

// budgetParams are the budget statements' named parameters.
var budgetParams = []string{"key", "now", "day", "month", "until", "cost", "n", "max", "resets"}

// budgetStmt is one budget statement in each database's placeholder
// syntax; params are the budgetParams it uses, in its numbering.
type budgetStmt struct {
	postgres, sqlite string
	params           []int
}

func (q budgetStmt) of(d migrations.Dialect) string {
	if d == migrations.Postgres {
		return q.postgres
	}
	return q.sqlite
}

// budgetArgs are the values of a budget statement's parameters besides the
// clock's.
type budgetArgs struct {
	key          string
	cost, n, max int64
	resets       int64
}

// args are the statement's arguments, in its numbering.
func (q budgetStmt) args(a budgetArgs, c BudgetClock) []any {
	all := [...]any{a.key, c.Now, c.Day, c.Month, c.Until, a.cost, a.n, a.max, a.resets}
	out := make([]any, len(q.params))
	for i, p := range q.params {
		out[i] = all[p]
	}
	return out
}

// budgetStatement numbers q's named parameters (@key …; budgetParams) in
// the order they first appear: $n on PostgreSQL, ?n on SQLite, each
// usable more than once.
func budgetStatement(q string) budgetStmt {
	var pg, lite strings.Builder
	var st budgetStmt
	for {
		i := strings.IndexByte(q, '@')
		if i < 0 {
			pg.WriteString(q)
			lite.WriteString(q)
			st.postgres, st.sqlite = pg.String(), lite.String()
			return st
		}
		pg.WriteString(q[:i])
		lite.WriteString(q[:i])
		q = q[i+1:]
		n := 0
		for n < len(q) && q[n] >= 'a' && q[n] <= 'z' {
			n++
		}
		p := slices.Index(budgetParams, q[:n])
		if p < 0 {
			panic("store: unknown budget parameter @" + q[:n])
		}
		k := slices.Index(st.params, p)
		if k < 0 {
			st.params = append(st.params, p)
			k = len(st.params) - 1
		}
		pg.WriteString("$" + strconv.Itoa(k+1))
		lite.WriteString("?" + strconv.Itoa(k+1))
		q = q[n:]
	}
}
