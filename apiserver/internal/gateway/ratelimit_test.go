package gateway

import (
	"net/http"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// setRateLimitHeadersBySet is the rate-limit headers written one
// Header.Set at a time, each value formatted on its own: the reference
// setRateLimitHeaders must match exactly.
func setRateLimitHeadersBySet(h http.Header, adm metering.Admission, model catalog.Model, anthropic, refused bool, now time.Time) {
	if refused {
		for k, v := range adm.Headers() {
			h.Set(k, v)
		}
	}
	if adm.Limit > 0 {
		rem := max(adm.Remaining, 0)
		if anthropic {
			h.Set("anthropic-ratelimit-requests-limit", strconv.FormatInt(adm.Limit, 10))
			h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(rem, 10))
			h.Set("anthropic-ratelimit-requests-reset", adm.Reset.UTC().Format(time.RFC3339))
		} else {
			h.Set("x-ratelimit-limit-requests", strconv.FormatInt(adm.Limit, 10))
			h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(rem, 10))
			h.Set("x-ratelimit-reset-requests", durationResetIn(adm.Reset, now))
		}
		secs := int64((max(adm.Reset.Sub(now), 0) + time.Second - 1) / time.Second)
		h.Set("RateLimit-Policy", `"requests";q=`+strconv.FormatInt(adm.Limit, 10)+`;w=`+
			strconv.FormatInt(int64(metering.RateWindow/time.Second), 10))
		h.Set("RateLimit", `"requests";r=`+strconv.FormatInt(rem, 10)+`;t=`+strconv.FormatInt(secs, 10))
	}
	w, price := adm.Window, model.Price.InputPerMTok
	if w.LimitMicro <= 0 || price <= 0 {
		return
	}
	limit := int64(float64(w.LimitMicro) / price)
	rem := max(int64(float64(w.LimitMicro-w.UsedMicro)/price), 0)
	if anthropic {
		h.Set("anthropic-ratelimit-tokens-limit", strconv.FormatInt(limit, 10))
		h.Set("anthropic-ratelimit-tokens-remaining", strconv.FormatInt(rem, 10))
		h.Set("anthropic-ratelimit-tokens-reset", w.Reset.UTC().Format(time.RFC3339))
		return
	}
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(limit, 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(rem, 10))
	h.Set("x-ratelimit-reset-tokens", durationResetIn(w.Reset, now))
}

// durationResetIn is resetIn through time.Duration's own String.
func durationResetIn(reset, now time.Time) string {
	d := reset.Sub(now)
	if d <= 0 {
		return "0s"
	}
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func TestRateLimitHeadersMatchSet(t *testing.T) {
	now := time.Date(2026, 11, 27, 20, 41, 17, 250_000_000, time.FixedZone("X", 3600))
	priced := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 2.5}}
	window := metering.WindowLeft{Name: "5h", LimitMicro: 40_000_000, UsedMicro: 1_234_567, Reset: now.Add(4*time.Hour + 59*time.Minute + 3*time.Second)}
	cases := []struct {
		name  string
		adm   metering.Admission
		model catalog.Model
	}{
		{"nothing applies", metering.Admission{}, priced},
		{"requests only", metering.Admission{Limit: 600, Remaining: 599, Reset: now.Add(42*time.Second + 750*time.Millisecond)}, catalog.Model{ID: "m"}},
		{"requests and tokens", metering.Admission{Limit: 60, Remaining: 0, Reset: now.Add(100 * time.Millisecond), Window: window}, priced},
		{"over the limit", metering.Admission{Limit: 60, Remaining: -3, Reset: now.Add(time.Minute), Window: window}, priced},
		{"reset past", metering.Admission{Limit: 1, Remaining: 1, Reset: now.Add(-time.Second), Window: metering.WindowLeft{LimitMicro: 5, UsedMicro: 9, Reset: now.Add(-time.Hour)}}, priced},
		{"tokens only", metering.Admission{Window: window}, priced},
		{"window without a price", metering.Admission{Limit: 10, Remaining: 4, Reset: now.Add(3 * time.Second), Window: window}, catalog.Model{ID: "m"}},
		{"a day's window", metering.Admission{Limit: 10, Remaining: 4, Reset: now.Add(3 * time.Second),
			Window: metering.WindowLeft{LimitMicro: 1 << 40, UsedMicro: 1, Reset: now.Add(26*time.Hour + 400*time.Millisecond)}}, priced},
	}
	for _, tc := range cases {
		for _, anthropic := range []bool{false, true} {
			for _, refused := range []bool{false, true} {
				want, got := http.Header{}, http.Header{}
				setRateLimitHeadersBySet(want, tc.adm, tc.model, anthropic, refused, now)
				setRateLimitHeaders(got, tc.adm, tc.model, anthropic, refused, now)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s (anthropic %v, refused %v):\n got %v\nwant %v", tc.name, anthropic, refused, got, want)
				}
				if _, generic := got["X-Ratelimit-Limit"]; generic != (refused && tc.adm.Limit != 0) {
					t.Errorf("%s (anthropic %v, refused %v): X-RateLimit-Limit present %v", tc.name, anthropic, refused, generic)
				}
			}
		}
	}
}

// The values share one backing array: appending to one header's values
// must not overwrite the next header's.
func TestRateLimitHeadersAddKeepsOthers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h := http.Header{}
	setRateLimitHeaders(h, metering.Admission{Limit: 60, Remaining: 7, Reset: now.Add(time.Minute)}, catalog.Model{}, false, true, now)
	before := h.Clone()
	h.Add("X-Ratelimit-Limit", "extra")
	if got := h.Values("X-Ratelimit-Limit"); len(got) != 2 || got[0] != "60" || got[1] != "extra" {
		t.Errorf("X-Ratelimit-Limit = %q", got)
	}
	for k, v := range before {
		if k != "X-Ratelimit-Limit" && !reflect.DeepEqual(h[k], v) {
			t.Errorf("%s changed from %q to %q", k, v, h[k])
		}
	}
}

func TestResetInMatchesDurationString(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ds := []time.Duration{-time.Second, 0, 1, 499 * time.Microsecond, 500 * time.Microsecond,
		17 * time.Millisecond, 999*time.Millisecond + 400*time.Microsecond, 999*time.Millisecond + 600*time.Microsecond,
		time.Second, 1499 * time.Millisecond, 1500 * time.Millisecond, 59*time.Second + 600*time.Millisecond,
		time.Minute, 6 * time.Minute, 61*time.Minute + 29*time.Second, time.Hour, 5*time.Hour - time.Millisecond,
		26*time.Hour + 3*time.Minute + 4*time.Second, 30 * 24 * time.Hour}
	for s := time.Duration(0); s < 2*time.Hour; s += 7*time.Second + 3*time.Millisecond {
		ds = append(ds, s)
	}
	for _, d := range ds {
		if got, want := resetIn(now.Add(d), now), durationResetIn(now.Add(d), now); got != want {
			t.Errorf("resetIn(%v) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkRateLimitHeaders writes the OpenAI set (requests and tokens)
// into a fresh header map, beside the same headers one Header.Set at a time
// (setRateLimitHeadersBySet, what it replaced).
func BenchmarkRateLimitHeaders(b *testing.B) {
	now := time.Now()
	adm := metering.Admission{Limit: 600, Remaining: 598, Reset: now.Add(40 * time.Second),
		Window: metering.WindowLeft{LimitMicro: 40_000_000, UsedMicro: 1_000, Reset: now.Add(time.Hour)}}
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 2.5}}
	for _, bc := range []struct {
		name string
		set  func(http.Header, metering.Admission, catalog.Model, bool, bool, time.Time)
	}{{"buffer", setRateLimitHeaders}, {"set", setRateLimitHeadersBySet}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.set(make(http.Header, 16), adm, model, false, false, now)
			}
		})
	}
}

// An exchange's Written sets the rate-limit headers admission computed,
// with admission's time, on its first call only (the upstream client and
// send may both call it).
func TestExchangeWrittenSetsHeadersOnce(t *testing.T) {
	admitted := time.Unix(1_800_000_000, 0)
	model := catalog.Model{ID: "m", Price: catalog.Price{InputPerMTok: 2}}
	adm := metering.Admission{Limit: 60, Remaining: 59, Reset: admitted.Add(42 * time.Second),
		Window: metering.WindowLeft{LimitMicro: 40_000_000, UsedMicro: 1, Reset: admitted.Add(time.Hour)}}
	for _, anthropic := range []bool{false, true} {
		want := http.Header{}
		setRateLimitHeadersBySet(want, adm, model, anthropic, false, admitted)
		x := &exchange{headers: http.Header{}, adm: adm, model: model, anthropic: anthropic, admittedAt: admitted}
		x.Written()
		if !reflect.DeepEqual(x.headers, want) {
			t.Errorf("anthropic %v: got %v\nwant %v", anthropic, x.headers, want)
		}
		x.headers.Set("RateLimit", "changed after")
		x.Written()
		if got := x.headers.Get("RateLimit"); got != "changed after" {
			t.Errorf("anthropic %v: a second Written set the headers again (RateLimit %q)", anthropic, got)
		}
	}
}
