package wire

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// ParseOutboxWait reads the ?wait= of an outbox poll: seconds ("10", "2.5")
// or a duration ("500ms"), capped at OutboxMaxWait; empty means no wait.
func ParseOutboxWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	var d time.Duration
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		switch {
		case math.IsNaN(f):
			return 0, fmt.Errorf("'wait' must be seconds or a duration, not %q", v)
		case f < 0:
			return 0, fmt.Errorf("'wait' must not be negative")
		case f >= OutboxMaxWait.Seconds(): // also keeps the conversion below from overflowing
			return OutboxMaxWait, nil
		}
		d = time.Duration(f * float64(time.Second))
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("'wait' must be seconds or a duration, not %q", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("'wait' must not be negative")
	}
	return min(d, OutboxMaxWait), nil
}

// ParseOutboxLimit reads the ?limit= of an outbox poll: default
// OutboxDefaultLimit, at most OutboxMaxLimit.
func ParseOutboxLimit(v string) (int, error) {
	if v == "" {
		return OutboxDefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("'limit' must be a positive integer, not %q", v)
	}
	return min(n, OutboxMaxLimit), nil
}
