package store

import (
	"context"
	"strconv"
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
	rows, err := s.sqlDB.QueryContext(ctx, numbered(q.String()), args...)
	if err != nil {
		return st, err
	}
	defer rows.Close()
	for rows.Next() {
		var kind, name string
		var value, resetsAt, startedAt int64
		if err := rows.Scan(&kind, &name, &value, &resetsAt, &startedAt); err != nil {
			return st, err
		}
		if kind == "rate" {
			st.Counts[name] = value
			continue
		}
		st.Windows = append(st.Windows, UsageWindow{WorkspaceID: workspaceID, WindowName: name,
			CreditsMicro: value, ResetsAt: resetsAt, StartedAt: startedAt})
	}
	return st, rows.Err()
}

// numbered rewrites the ? placeholders of q, which has no ? anywhere else
// (no string literal or operator holds one), as PostgreSQL's $1, $2, … for
// a statement sent straight to database/sql: the admission statements run
// on the request path, and the ORM's Raw(…).Scan renders every statement
// with its values for its logger (a regular expression per statement)
// whether or not anything logs it.
func numbered(q string) string {
	b := make([]byte, 0, len(q)+16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '?' {
			b = append(b, q[i])
			continue
		}
		n++
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return string(b)
}
