package metering

import (
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// WindowState is one plan window as a workspace stands in it: what is used
// of the limit and when the window resets (nil: no usage in an open window).
type WindowState struct {
	Name       string     `json:"name"`
	Duration   string     `json:"duration"`
	UsedMicro  int64      `json:"usedMicro"`
	LimitMicro int64      `json:"limitMicro"`
	ResetsAt   *time.Time `json:"resetsAt,omitempty"`
}

// Percent is the used share of the limit, 0 to 100.
func (w WindowState) Percent() int {
	if w.LimitMicro <= 0 {
		return 0
	}
	p := int(w.UsedMicro * 100 / w.LimitMicro)
	return min(max(p, 0), 100)
}

// WindowStates lays a workspace's window counters over its plan's windows;
// a counter whose window has closed counts as no usage.
func WindowStates(plan catalog.Plan, counters []store.UsageWindow, now time.Time) []WindowState {
	out := make([]WindowState, 0, len(plan.Windows))
	for _, pw := range plan.Windows {
		st := WindowState{Name: pw.Name, Duration: pw.Duration.String(), LimitMicro: pw.LimitMicro()}
		for _, c := range counters {
			if c.WindowName == pw.Name && c.ResetsAt > now.UnixMilli() {
				t := time.UnixMilli(c.ResetsAt).UTC()
				st.UsedMicro, st.ResetsAt = c.CreditsMicro, &t
			}
		}
		out = append(out, st)
	}
	return out
}
