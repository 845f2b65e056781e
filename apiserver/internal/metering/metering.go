// Package metering enforces and records public-API usage per workspace
// (spec 1 and 8; DESIGN.md §6): requests per minute per API key and per
// workspace, shared by every replica through the database; usage windows in
// credits computed from the upstream's reported tokens and the model price;
// and the usage record of each answered request.
package metering

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/apierr"
	"github.com/svc-dev/svc/apiserver/internal/auth"
	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// RateWindow is the length of a rate-limit window.
const RateWindow = time.Minute

// Meter checks and records usage.
type Meter struct {
	Store    *store.Store
	Recorder *Recorder // when set, Record queues instead of writing inline
	Now      func() time.Time
}

// New returns a Meter on st with the wall clock; rec may be nil.
func New(st *store.Store, rec *Recorder) *Meter {
	return &Meter{Store: st, Recorder: rec, Now: time.Now}
}

// Admission is what a successful Admit tells the response.
type Admission struct {
	Limit     int64 // the tightest applicable limit, 0 when none
	Remaining int64
	Reset     time.Time
}

// Headers returns the X-RateLimit-* headers of a.
func (a Admission) Headers() map[string]string {
	if a.Limit == 0 {
		return nil
	}
	return map[string]string{
		"X-RateLimit-Limit":     strconv.FormatInt(a.Limit, 10),
		"X-RateLimit-Remaining": strconv.FormatInt(max(a.Remaining, 0), 10),
		"X-RateLimit-Reset":     strconv.FormatInt(a.Reset.Unix(), 10),
	}
}

type bucket struct {
	name  string
	limit int64
}

// Admit applies the rate limits, then the usage windows (spec 7.1 order:
// 429 before 402), from one database round trip on PostgreSQL.
func (m *Meter) Admit(ctx context.Context, p auth.Principal, plan catalog.Plan) (Admission, error) {
	now := m.Now()
	windowStart := now.Truncate(RateWindow)
	reset := windowStart.Add(RateWindow)

	var buckets []bucket
	if p.KeyID != "" && plan.RPM > 0 {
		buckets = append(buckets, bucket{"key:" + p.KeyID, plan.RPM})
	}
	if p.ProjectID != "" && plan.RPM > 0 {
		buckets = append(buckets, bucket{"project:" + p.ProjectID, plan.RPM})
	}
	if plan.WorkspaceRPM > 0 {
		buckets = append(buckets, bucket{"ws:" + p.WorkspaceID, plan.WorkspaceRPM})
	}

	names := make([]string, len(buckets))
	for i, b := range buckets {
		names[i] = b.name
	}
	st, err := m.Store.Admit(ctx, windowStart.UnixMilli(), names, p.WorkspaceID,
		!p.UsageBasedPricing && len(plan.Windows) > 0)
	if err != nil {
		if ctx.Err() != nil {
			return Admission{}, apierr.Internal(fmt.Errorf("metering: admit: %w", err))
		}
		return Admission{}, apierr.Unavailable(fmt.Errorf("metering: admit: %w", err))
	}
	counts, windows := st.Counts, st.Windows

	adm := Admission{Reset: reset}
	for _, b := range buckets {
		n := counts[b.name]
		if n > b.limit {
			return Admission{}, apierr.RateLimited(reset.Sub(now), Admission{Limit: b.limit, Remaining: 0, Reset: reset}.Headers())
		}
		if adm.Limit == 0 || b.limit-n < adm.Remaining {
			adm.Limit, adm.Remaining = b.limit, b.limit-n
		}
	}

	nowMs := now.UnixMilli()
	for _, w := range plan.Windows {
		for _, c := range windows {
			if c.WindowName == w.Name && c.ResetsAt > nowMs && c.CreditsMicro >= w.LimitMicro() {
				return Admission{}, apierr.UsageLimitReached(w.Name, time.UnixMilli(c.ResetsAt))
			}
		}
	}
	return adm, nil
}

// Usage is the token usage an upstream reported for one request.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	ReasoningTokens  int64
}

// Record stores the usage of one answered request and adds its credits to
// the plan's windows.
func (m *Meter) Record(ctx context.Context, p auth.Principal, plan catalog.Plan, model catalog.Model,
	requestID string, u Usage, streamed bool) error {
	rec := store.UsageRecord{
		RequestID: requestID, WorkspaceID: p.WorkspaceID, Model: model.ID,
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, ReasoningTokens: u.ReasoningTokens,
		CreditsMicro: model.CreditsMicro(u.PromptTokens, u.CompletionTokens), Streamed: streamed,
	}
	if p.KeyID != "" {
		rec.APIKeyID = &p.KeyID
	}
	if p.ProjectID != "" {
		rec.ProjectID = &p.ProjectID
	}
	specs := make([]store.WindowSpec, len(plan.Windows))
	for i, w := range plan.Windows {
		specs[i] = store.WindowSpec{Name: w.Name, Duration: w.Duration}
	}
	if m.Recorder != nil {
		rec.CreatedAt = m.Now().UTC()
		m.Recorder.Enqueue(rec, specs)
		return nil
	}
	return m.Store.RecordUsage(ctx, rec, specs, m.Now())
}
