package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
)

// UsageRecord is the metered usage of one completion request.
type UsageRecord struct {
	ID               int64   `gorm:"primaryKey;autoIncrement" json:"id"`
	RequestID        string  `json:"requestId"`
	WorkspaceID      string  `json:"workspaceId"`
	APIKeyID         *string `json:"apiKeyId,omitempty"`
	ProjectID        *string `json:"projectId,omitempty"`
	Model            string  `json:"model"`
	Deployment       string  `json:"deployment"` // provider/upstream_model that answered
	PromptTokens     int64   `json:"promptTokens"`
	CompletionTokens int64   `json:"completionTokens"`
	ReasoningTokens  int64   `json:"reasoningTokens"`
	// CachedTokens were read from the provider's prompt cache and
	// CacheWriteTokens written to it; both are part of PromptTokens.
	CachedTokens     int64     `json:"cachedTokens"`
	CacheWriteTokens int64     `json:"cacheWriteTokens"`
	CreditsMicro     int64     `json:"creditsMicro"`
	Streamed         bool      `json:"streamed"`
	CreatedAt        time.Time `json:"createdAt"`
}

// UsageWindow is the running credit counter of one plan window; times are
// unix milliseconds so one SQL statement can roll it on both dialects.
type UsageWindow struct {
	WorkspaceID  string `gorm:"primaryKey" json:"workspaceId"`
	WindowName   string `gorm:"primaryKey" json:"window"`
	StartedAt    int64  `json:"startedAtMs"`
	ResetsAt     int64  `json:"resetsAtMs"`
	CreditsMicro int64  `json:"creditsMicro"`
}

// WindowSpec is one plan window (docs/design.md §5, plans file): a rolling window of
// Duration that opens at the first request after the previous one closed.
type WindowSpec struct {
	Name     string
	Duration time.Duration
}

// windowUpsert adds credits to a window, restarting it at the given start
// when its reset time has passed (one statement, both dialects).
var windowUpsert = positional(`INSERT INTO usage_windows (workspace_id, window_name, started_at, resets_at, credits_micro)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (workspace_id, window_name) DO UPDATE SET
  credits_micro = CASE WHEN usage_windows.resets_at <= excluded.started_at
                       THEN excluded.credits_micro ELSE usage_windows.credits_micro + excluded.credits_micro END,
  resets_at     = CASE WHEN usage_windows.resets_at <= excluded.started_at
                       THEN excluded.resets_at ELSE usage_windows.resets_at END,
  started_at    = CASE WHEN usage_windows.resets_at <= excluded.started_at
                       THEN excluded.started_at ELSE usage_windows.started_at END`)

// UsageWindows returns a workspace's window counters.
func (s *Store) UsageWindows(ctx context.Context, workspaceID string) ([]UsageWindow, error) {
	return all[UsageWindow](ctx, s.db.Order("window_name"), "workspace_id = ?", workspaceID)
}

// RecordUsage inserts the usage record and adds its credits to every window
// in one transaction. A window whose reset time has passed restarts at now
// with just these credits.
func (s *Store) RecordUsage(ctx context.Context, rec UsageRecord, windows []WindowSpec, now time.Time) error {
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now.UTC()
	}
	if err := s.ensureDays(ctx, []time.Time{rec.CreatedAt}); err != nil {
		return err
	}
	nowMs := now.UnixMilli()
	return s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Create(&rec).Error; err != nil {
			return err
		}
		if err := addDaily(tx, []UsageRecord{rec}); err != nil {
			return err
		}
		for _, w := range windows {
			err := windowUpsert.exec(tx, rec.WorkspaceID, w.Name, nowMs, nowMs+w.Duration.Milliseconds(), rec.CreditsMicro)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// RecordUsageBatch writes many usage records in one transaction, exactly
// once: records already written are skipped (a retried batch), the others
// inserted and their credits added to the windows.
func (s *Store) RecordUsageBatch(ctx context.Context, recs []UsageRecord, windows [][]WindowSpec, now time.Time) error {
	return s.recordUsage(ctx, recs, windows, now, true)
}

// RecordNewUsageBatch is RecordUsageBatch for records no write has been
// tried for yet (the usage writer's first attempt at a batch from its
// queue): none of them can be in usage_records, so the check for records
// already written is skipped. A batch whose attempt failed — committed or
// not — must be retried with RecordUsageBatch.
func (s *Store) RecordNewUsageBatch(ctx context.Context, recs []UsageRecord, windows [][]WindowSpec, now time.Time) error {
	return s.recordUsage(ctx, recs, windows, now, false)
}

func (s *Store) recordUsage(ctx context.Context, recs []UsageRecord, windows [][]WindowSpec, now time.Time, retried bool) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if recs[i].CreatedAt.IsZero() {
			recs[i].CreatedAt = now.UTC()
		}
		// The database keeps microseconds: a record read back compares
		// equal to the one written (the idempotency check below).
		recs[i].CreatedAt = recs[i].CreatedAt.Truncate(time.Microsecond)
	}
	times := make([]time.Time, len(recs))
	for i, r := range recs {
		times[i] = r.CreatedAt
	}
	if err := s.ensureDays(ctx, times); err != nil {
		return err
	}
	nowMs := now.UnixMilli()
	return s.tx(ctx, func(tx *gorm.DB) error {
		// Idempotent: a record already written — a batch whose commit
		// succeeded but whose acknowledgement was lost, retried — is
		// skipped, and its credits are not added to the windows twice. A
		// record is the same when its request id and creation time are
		// (a client's own X-Request-Id may repeat; the time does not).
		if retried {
			var err error
			if recs, windows, err = unwritten(tx, recs, windows); err != nil || len(recs) == 0 {
				return err
			}
		}
		return insertUsage(tx, recs, windows, nowMs)
	})
}

// unwritten drops the records of recs already in usage_records.
func unwritten(tx *gorm.DB, recs []UsageRecord, windows [][]WindowSpec) ([]UsageRecord, [][]WindowSpec, error) {
	first, last := recs[0].CreatedAt, recs[0].CreatedAt
	for _, r := range recs {
		if r.CreatedAt.Before(first) {
			first = r.CreatedAt
		}
		if r.CreatedAt.After(last) {
			last = r.CreatedAt
		}
	}
	type written struct {
		RequestID string
		CreatedAt time.Time
	}
	var found []written
	sql, args := unwrittenQuery(tx.Dialector.Name(), recs, first, last)
	rows, err := tx.Statement.ConnPool.QueryContext(tx.Statement.Context, sql, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var w written
		if err := rows.Scan(&w.RequestID, &w.CreatedAt); err != nil {
			return nil, nil, err
		}
		found = append(found, w)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(found) == 0 {
		return recs, windows, nil
	}
	keep, keepW := recs[:0:0], windows[:0:0]
	for i, r := range recs {
		dup := false
		for _, f := range found {
			if f.RequestID == r.RequestID && f.CreatedAt.Equal(r.CreatedAt) {
				dup = true
				break
			}
		}
		if !dup {
			keep, keepW = append(keep, r), append(keepW, windows[i])
		}
	}
	return keep, keepW, nil
}

// unwrittenLateral looks up a batch's records one by one on PostgreSQL: each
// (request id, creation time) pair of the arrays $1 and $2 is an index probe
// of usage_records_request_idx, within the batch's time range $3–$4 (which
// keeps the probes to the batch's partitions). The lookup must not depend on
// the planner's statistics: a request_id IN (…) list of a full batch on a
// partition growing faster than autovacuum analyzes it was planned as a
// sequential scan of the whole partition, so every batch read the day's rows
// so far. OFFSET 0 keeps the subquery a parameterised nested loop (PostgreSQL
// would otherwise flatten it into a join free to choose that scan again).
const unwrittenLateral = `SELECT u.request_id, u.created_at
FROM unnest($1::text[], $2::timestamptz[]) AS r(id, t)
CROSS JOIN LATERAL (SELECT request_id, created_at FROM usage_records
  WHERE request_id = r.id AND created_at = r.t AND created_at >= $3 AND created_at <= $4 OFFSET 0) u`

// unwrittenQuery is unwritten's lookup of recs (created between first and
// last) for the dialect: unwrittenLateral on PostgreSQL, an IN list on
// SQLite (one table, where the planner uses the index for it).
func unwrittenQuery(dialect string, recs []UsageRecord, first, last time.Time) (string, []any) {
	if dialect == "postgres" {
		ids, times := make([]string, len(recs)), make([]time.Time, len(recs))
		for i, r := range recs {
			ids[i], times[i] = r.RequestID, r.CreatedAt
		}
		return unwrittenLateral, []any{ids, times, first, last}
	}
	q := make([]byte, 0, 96+2*len(recs))
	q = append(q, "SELECT request_id, created_at FROM usage_records WHERE request_id IN ("...)
	args := make([]any, 0, len(recs)+2)
	for i, r := range recs {
		if i > 0 {
			q = append(q, ',')
		}
		q = append(q, '?')
		args = append(args, r.RequestID)
	}
	q = append(q, ") AND created_at >= ? AND created_at <= ?"...)
	return string(q), append(args, first, last)
}

// insertUsage inserts recs and adds their credits to the windows: one
// multi-row insert, then one window update per workspace and window with
// the summed credits.
func insertUsage(tx *gorm.DB, recs []UsageRecord, windows [][]WindowSpec, nowMs int64) error {
	type key struct {
		ws, name string
		dur      time.Duration
	}
	sums := map[key]int64{}
	var order []key
	for i, r := range recs {
		for _, w := range windows[i] {
			k := key{r.WorkspaceID, w.Name, w.Duration}
			if _, seen := sums[k]; !seen {
				order = append(order, k)
			}
			sums[k] += r.CreditsMicro
		}
	}
	if err := insertRecords(tx, recs); err != nil {
		return err
	}
	if err := addDaily(tx, recs); err != nil {
		return err
	}
	for _, k := range order {
		if err := windowUpsert.exec(tx, k.ws, k.name, nowMs, nowMs+k.dur.Milliseconds(), sums[k]); err != nil {
			return err
		}
	}
	return nil
}

// usageColumns are usage_records' columns as insertRecords writes them (the
// id is the database's).
const usageColumns = `INSERT INTO usage_records (request_id, workspace_id, api_key_id, project_id, model, deployment,
  prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cache_write_tokens, credits_micro, streamed,
  created_at) VALUES `

// usageFields is how many columns usageColumns names.
const usageFields = 14

// insertBatch bounds the records of one INSERT (usageFields parameters
// each, far under either database's limit).
const insertBatch = 500

// insertRecords inserts recs as raw SQL sent straight
// to the transaction's connection: the batch writer's hot statement,
// without the ORM's reflection over the model or its rewriting of every
// placeholder, and without reading the new ids back (nothing uses them).
func insertRecords(tx *gorm.DB, recs []UsageRecord) error {
	if tx.Dialector.Name() == "postgres" {
		return insertRecordsArrays(tx, recs)
	}
	for len(recs) > 0 { // SQLite: multi-row VALUES lists

		n := min(len(recs), insertBatch)
		sql := make([]byte, 0, len(usageColumns)+n*usageFields*6)
		sql = append(sql, usageColumns...)
		args := make([]any, 0, n*usageFields)
		for i, r := range recs[:n] {
			if i > 0 {
				sql = append(sql, ',')
			}
			sql = append(sql, '(')
			for f := range usageFields {
				if f > 0 {
					sql = append(sql, ',')
				}
				sql = append(sql, '?')
			}
			sql = append(sql, ')')
			args = append(args, r.RequestID, r.WorkspaceID, r.APIKeyID, r.ProjectID, r.Model, r.Deployment,
				r.PromptTokens, r.CompletionTokens, r.ReasoningTokens, r.CachedTokens, r.CacheWriteTokens, r.CreditsMicro,
				r.Streamed, r.CreatedAt)
		}
		if _, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, string(sql), args...); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// insertUnnest inserts a whole batch on PostgreSQL from one array per
// column: one statement text whatever the batch's size, so the driver
// prepares it once per connection and the server plans it once, where a
// multi-row VALUES list of each size was a new statement of up to 7,000
// parameters to parse and plan.
const insertUnnest = `INSERT INTO usage_records (request_id, workspace_id, api_key_id, project_id, model, deployment,
  prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cache_write_tokens, credits_micro, streamed,
  created_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
  $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::boolean[], $14::timestamptz[])`

// insertRecordsArrays is insertRecords on PostgreSQL (insertUnnest).
func insertRecordsArrays(tx *gorm.DB, recs []UsageRecord) error {
	n := len(recs)
	reqIDs, wsIDs, models, deps := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keyIDs, projectIDs := make([]*string, n), make([]*string, n)
	prompt, completion, reasoning := make([]int64, n), make([]int64, n), make([]int64, n)
	cached, cacheWrite, credits := make([]int64, n), make([]int64, n), make([]int64, n)
	streamed, created := make([]bool, n), make([]time.Time, n)
	for i, r := range recs {
		reqIDs[i], wsIDs[i], keyIDs[i], projectIDs[i], models[i], deps[i] =
			r.RequestID, r.WorkspaceID, r.APIKeyID, r.ProjectID, r.Model, r.Deployment
		prompt[i], completion[i], reasoning[i] = r.PromptTokens, r.CompletionTokens, r.ReasoningTokens
		cached[i], cacheWrite[i], credits[i] = r.CachedTokens, r.CacheWriteTokens, r.CreditsMicro
		streamed[i], created[i] = r.Streamed, r.CreatedAt
	}
	_, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, insertUnnest, reqIDs, wsIDs, keyIDs,
		projectIDs, models, deps, prompt, completion, reasoning, cached, cacheWrite, credits, streamed, created)
	return err
}

// dailyTotals sums usage_daily rows: the aggregates the records add to in
// their own transaction (addDaily), so totals never scan usage_records.
const dailyTotals = `COALESCE(SUM(requests),0) AS requests, COALESCE(SUM(prompt_tokens),0) AS prompt_tokens,
COALESCE(SUM(completion_tokens),0) AS completion_tokens, COALESCE(SUM(reasoning_tokens),0) AS reasoning_tokens,
COALESCE(SUM(cached_tokens),0) AS cached_tokens, COALESCE(SUM(cache_write_tokens),0) AS cache_write_tokens,
COALESCE(SUM(credits_micro),0) AS credits_micro`

// dailyUpsert adds one group of records to its day's aggregate.
var dailyUpsert = positional(`INSERT INTO usage_daily (workspace_id, day, model, deployment, requests, prompt_tokens,
  completion_tokens, reasoning_tokens, cached_tokens, cache_write_tokens, credits_micro)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (workspace_id, day, model, deployment) DO UPDATE SET
  requests = usage_daily.requests + excluded.requests,
  prompt_tokens = usage_daily.prompt_tokens + excluded.prompt_tokens,
  completion_tokens = usage_daily.completion_tokens + excluded.completion_tokens,
  reasoning_tokens = usage_daily.reasoning_tokens + excluded.reasoning_tokens,
  cached_tokens = usage_daily.cached_tokens + excluded.cached_tokens,
  cache_write_tokens = usage_daily.cache_write_tokens + excluded.cache_write_tokens,
  credits_micro = usage_daily.credits_micro + excluded.credits_micro`)

// addDaily adds recs to usage_daily (one upsert per workspace, UTC day,
// model and deployment), in the records' transaction.
func addDaily(tx *gorm.DB, recs []UsageRecord) error {
	type key struct{ ws, day, model, dep string }
	sums := map[key]*UsageTotals{}
	var order []key
	for _, r := range recs {
		k := key{r.WorkspaceID, r.CreatedAt.UTC().Format(time.DateOnly), r.Model, r.Deployment}
		t := sums[k]
		if t == nil {
			t = &UsageTotals{}
			sums[k] = t
			order = append(order, k)
		}
		t.Requests++
		t.PromptTokens += r.PromptTokens
		t.CompletionTokens += r.CompletionTokens
		t.ReasoningTokens += r.ReasoningTokens
		t.CachedTokens += r.CachedTokens
		t.CacheWriteTokens += r.CacheWriteTokens
		t.CreditsMicro += r.CreditsMicro
	}
	for _, k := range order {
		t := sums[k]
		if err := dailyUpsert.exec(tx, k.ws, k.day, k.model, k.dep, t.Requests, t.PromptTokens, t.CompletionTokens,
			t.ReasoningTokens, t.CachedTokens, t.CacheWriteTokens, t.CreditsMicro); err != nil {
			return err
		}
	}
	return nil
}

// UsageTotals sums a workspace's usage records.
type UsageTotals struct {
	Requests         int64 `json:"requests"`
	PromptTokens     int64 `json:"promptTokens"`
	CompletionTokens int64 `json:"completionTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens"`
	CachedTokens     int64 `json:"cachedTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	CreditsMicro     int64 `json:"creditsMicro"`
}

// SumUsageByDeployment totals a workspace's usage records per deployment
// that answered ("" for records from before deployments were recorded).
func (s *Store) SumUsageByDeployment(ctx context.Context, workspaceID string) (map[string]UsageTotals, error) {
	var rows []struct {
		Deployment string
		UsageTotals
	}
	err := s.db.WithContext(ctx).Table("usage_daily").Where("workspace_id = ?", workspaceID).
		Select(`deployment, ` + dailyTotals).Group("deployment").Scan(&rows).Error
	out := make(map[string]UsageTotals, len(rows))
	for _, r := range rows {
		out[r.Deployment] = r.UsageTotals
	}
	return out, err
}

// SumUsage totals every usage record of a workspace.
func (s *Store) SumUsage(ctx context.Context, workspaceID string) (UsageTotals, error) {
	var t UsageTotals
	err := s.db.WithContext(ctx).Table("usage_daily").Where("workspace_id = ?", workspaceID).
		Select(dailyTotals).Scan(&t).Error
	return t, err
}

// UsageDay is one model's usage on one UTC day.
type UsageDay struct {
	Day              string `json:"day"` // YYYY-MM-DD
	Model            string `json:"model"`
	Requests         int64  `json:"requests"`
	PromptTokens     int64  `json:"promptTokens"`
	CompletionTokens int64  `json:"completionTokens"`
	CreditsMicro     int64  `json:"creditsMicro"`
}

// UsageByDay sums a workspace's usage per UTC day and model from since's
// day on (the console's usage chart), ordered by day and model, from the
// daily aggregates.
func (s *Store) UsageByDay(ctx context.Context, workspaceID string, since time.Time) ([]UsageDay, error) {
	var out []UsageDay
	err := s.db.WithContext(ctx).Table("usage_daily").
		Select(`day, model, COALESCE(SUM(requests),0) AS requests, COALESCE(SUM(prompt_tokens),0) AS prompt_tokens,
COALESCE(SUM(completion_tokens),0) AS completion_tokens, COALESCE(SUM(credits_micro),0) AS credits_micro`).
		Where("workspace_id = ? AND day >= ?", workspaceID, since.UTC().Format(time.DateOnly)).
		Group("day, model").Order("day, model").Scan(&out).Error
	return out, err
}

// positionalStmt is one of the usage writer's statements in each
// database's placeholder syntax, built once: sent straight to the
// transaction's connection (as insertRecords sends its own), not rebuilt
// by the ORM byte by byte on every batch.
type positionalStmt struct{ postgres, sqlite string }

// positional numbers q's ? placeholders ($1, $2 …) for PostgreSQL; q has
// no ? of its own in a literal.
func positional(q string) positionalStmt {
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return positionalStmt{postgres: b.String(), sqlite: q}
}

func (q positionalStmt) exec(tx *gorm.DB, args ...any) error {
	sql := q.sqlite
	if tx.Dialector.Name() == "postgres" {
		sql = q.postgres
	}
	_, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, sql, args...)
	return err
}
