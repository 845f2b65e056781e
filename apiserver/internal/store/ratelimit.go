package store

import (
	"context"
	"time"
)

// IncrRateCounters adds one request to each bucket's counter for the window
// that starts at windowStart (unix ms) and returns the new counts, in one
// statement so every replica sees one count (DESIGN.md §6, rate limits).
func (s *Store) IncrRateCounters(ctx context.Context, windowStart int64, buckets ...string) (map[string]int64, error) {
	if len(buckets) == 0 {
		return nil, nil
	}
	q := "INSERT INTO rate_counters (bucket, window_start, count) VALUES "
	args := make([]any, 0, 2*len(buckets))
	for i, b := range buckets {
		if i > 0 {
			q += ", "
		}
		q += "(?, ?, 1)"
		args = append(args, b, windowStart)
	}
	q += " ON CONFLICT (bucket, window_start) DO UPDATE SET count = rate_counters.count + 1 RETURNING bucket, count"
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
