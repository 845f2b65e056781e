package store

import (
	"context"
	"time"
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
	var rows []struct {
		Bucket string
		Count  int64
	}
	if err := s.db.WithContext(ctx).Raw(q, args...).Scan(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Bucket] = r.Count
	}
	return out, nil
}

// PruneRateCounters deletes counters of windows that ended before cutoff.
func (s *Store) PruneRateCounters(ctx context.Context, cutoff time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Exec("DELETE FROM rate_counters WHERE window_start < ?", cutoff.UnixMilli())
	return res.RowsAffected, res.Error
}
