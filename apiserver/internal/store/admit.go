package store

import (
	"context"
	"strings"

	"github.com/svc-dev/svc/migrations"
)

// AdmitState is what admission control reads for one request.
type AdmitState struct {
	Counts  map[string]int64 // rate bucket → count including this request
	Windows []UsageWindow    // the workspace's usage windows (when asked for)
}

// Admit increments the rate buckets of the window starting at windowStart
// (unix ms) and, when withWindows, reads the workspace's usage windows. On
// PostgreSQL both happen in one statement (one round trip on the hot path);
// on SQLite in two.
func (s *Store) Admit(ctx context.Context, windowStart int64, buckets []string, workspaceID string, withWindows bool) (AdmitState, error) {
	st := AdmitState{Counts: map[string]int64{}}
	if s.dialect != migrations.Postgres || len(buckets) == 0 || !withWindows {
		var err error
		if len(buckets) > 0 {
			if st.Counts, err = s.IncrRateCounters(ctx, windowStart, buckets...); err != nil {
				return st, err
			}
		}
		if withWindows {
			st.Windows, err = s.UsageWindows(ctx, workspaceID)
		}
		return st, err
	}
	var q strings.Builder
	q.WriteString("WITH rc AS (INSERT INTO rate_counters (bucket, window_start, count) VALUES ")
	args := make([]any, 0, 2*len(buckets)+1)
	for i, b := range buckets {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, 1)")
		args = append(args, b, windowStart)
	}
	q.WriteString(` ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1 RETURNING bucket, count)
SELECT 'rate' AS kind, bucket AS name, count AS value, 0 AS resets_at, 0 AS started_at FROM rc
UNION ALL
SELECT 'window', window_name, credits_micro, resets_at, started_at FROM usage_windows WHERE workspace_id = ?`)
	args = append(args, workspaceID)
	var rows []struct {
		Kind      string
		Name      string
		Value     int64
		ResetsAt  int64
		StartedAt int64
	}
	if err := s.db.WithContext(ctx).Raw(q.String(), args...).Scan(&rows).Error; err != nil {
		return st, err
	}
	for _, r := range rows {
		if r.Kind == "rate" {
			st.Counts[r.Name] = r.Value
			continue
		}
		st.Windows = append(st.Windows, UsageWindow{WorkspaceID: workspaceID, WindowName: r.Name,
			CreditsMicro: r.Value, ResetsAt: r.ResetsAt, StartedAt: r.StartedAt})
	}
	return st, nil
}
