package webhookqueue

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// DefaultSchedule is the delay before each of the API's attempts, counted
// from the previous one (the first from the pod's hand-over): Standard
// Webhooks' and Svix's 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then
// three more 14 h steps, about 2.9 days in all (±20 % jitter each).
const DefaultSchedule = "5s,5m,30m,2h,5h,10h,10h,14h,14h,14h"

// jitterPercent is the ± jitter of every delay.
const jitterPercent = 20

// Schedule is the delays of the API's attempts.
type Schedule []time.Duration

// ParseSchedule reads a comma-separated list of positive Go durations
// (SVC_WEBHOOK_RETRY_SCHEDULE).
func ParseSchedule(s string) (Schedule, error) {
	var out Schedule
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("webhook retry schedule: %q is not a positive duration", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("webhook retry schedule: no delays")
	}
	return out, nil
}

// MustSchedule is ParseSchedule of a literal.
func MustSchedule(s string) Schedule {
	sc, err := ParseSchedule(s)
	if err != nil {
		panic(err)
	}
	return sc
}

// Delay is the jittered delay before the API's attempt n (0-based); ok is
// false when the schedule has no attempt n (the queue is exhausted).
func (s Schedule) Delay(n int) (d time.Duration, ok bool) {
	if n < 0 || n >= len(s) {
		return 0, false
	}
	return Jitter(s[n]), true
}

// Total is the whole schedule without jitter.
func (s Schedule) Total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// Jitter returns d ± jitterPercent %.
func Jitter(d time.Duration) time.Duration {
	span := int64(d) * jitterPercent / 100
	if span <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(2*span+1)-span)
}
