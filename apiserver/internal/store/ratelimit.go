package store

import (
	"context"
	"time"

	"github.com/svc-dev/svc/migrations"
)

// IncrRateCounters adds one request to each bucket's counter for the window
// that starts at windowStart (unix ms) and returns the new counts, in one
// statement so every replica sees one count (docs/design.md §6, rate limits).
func (s *Store) IncrRateCounters(ctx context.Context, windowStart int64, buckets ...string) (map[string]int64, error) {
	incr := make([]RateIncrement, len(buckets))
	for i, b := range buckets {
		incr[i] = RateIncrement{Bucket: b, N: 1}
	}
	return s.AddRateCounters(ctx, windowStart, incr)
}

// AddRateCounters adds each increment to its bucket's counter and returns
// the new counts, in one statement.
func (s *Store) AddRateCounters(ctx context.Context, windowStart int64, incr []RateIncrement) (map[string]int64, error) {
	if len(incr) == 0 {
		return nil, nil
	}
	q := "INSERT INTO rate_counters (bucket, window_start, count) VALUES "
	args := make([]any, 0, 3*len(incr))
	for i, in := range incr {
		if i > 0 {
			q += ", "
		}
		q += "(?, ?, ?)"
		args = append(args, in.Bucket, windowStart, in.N)
	}
	q += " ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + excluded.count RETURNING bucket, count"
	if s.dialect == migrations.Postgres {
		q = numbered(q)
	}
	rows, err := s.sqlDB.QueryContext(ctx, q, args...) // not the ORM's Scan: see numbered
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]int64, len(incr))
	for rows.Next() {
		var bucket string
		var count int64
		if err := rows.Scan(&bucket, &count); err != nil {
			return nil, err
		}
		out[bucket] = count
	}
	return out, rows.Err()
}

// PruneRateCounters deletes counters of windows that ended before cutoff.
func (s *Store) PruneRateCounters(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Exec("DELETE FROM rate_counters WHERE window_start < ?", cutoff.UnixMilli())
	return res.RowsAffected, res.Error
}
