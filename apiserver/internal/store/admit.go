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

// RateIncrement adds N to one rate bucket's counter.
type RateIncrement struct {
	Bucket string
	N      int64
}

// Admit adds each increment to its bucket's counter for the window starting
// at windowStart (unix ms) and, when withWindows, reads the workspace's usage
// windows. On PostgreSQL both happen in one statement (one round trip); on
// SQLite in two.
func (s *Store) Admit(ctx context.Context, windowStart int64, incr []RateIncrement, workspaceID string, withWindows bool) (AdmitState, error) {
	st := AdmitState{Counts: map[string]int64{}}
	if s.dialect != migrations.Postgres || len(incr) == 0 || !withWindows {
		var err error
		if len(incr) > 0 {
			if st.Counts, err = s.AddRateCounters(ctx, windowStart, incr); err != nil {
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
	args := make([]any, 0, 3*len(incr)+1)
	for i, in := range incr {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?)")
		args = append(args, in.Bucket, windowStart, in.N)
	}
	q.WriteString(` ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + excluded.count RETURNING bucket, count)
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
