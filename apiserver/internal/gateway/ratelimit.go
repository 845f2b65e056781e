package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
	"github.com/svc-dev/svc/apiserver/internal/metering"
)

// Rate-limit headers (docs/gateway.md, Rate-limit headers): what clients
// and agent tools read to pace themselves, on every answer from admission
// on — admitted or refused.
//
//   - OpenAI's, on chat completions and Responses: x-ratelimit-limit-,
//     -remaining- and -reset-requests (the tightest requests-per-minute
//     limit) and the same -tokens trio (the plan's usage window with the
//     fewest credits left, in tokens of the requested model at its input
//     price); resets as Go duration strings ("1s", "6m0s"), as OpenAI sends.
//   - Anthropic's, on Messages: anthropic-ratelimit-requests-limit,
//     -remaining, -reset and the -tokens trio; resets as RFC 3339 times.
//   - The IETF pair on both: RateLimit-Policy: "requests";q=<limit>;w=60
//     and RateLimit: "requests";r=<remaining>;t=<seconds to reset>.
//
// The generic X-RateLimit-Limit/-Remaining/-Reset set stays as before.
// A trio is left out when its limit does not apply (no requests-per-minute
// limit; no usage window, usage-based pricing, or a model without a price).

// setRateLimitHeaders writes adm's rate-limit headers for a request of
// model in the wire format of anthropic or OpenAI's.
func setRateLimitHeaders(h http.Header, adm metering.Admission, model catalog.Model, anthropic bool, now time.Time) {
	adm.SetHeaders(h)
	if adm.Limit > 0 {
		rem := max(adm.Remaining, 0)
		if anthropic {
			h["Anthropic-Ratelimit-Requests-Limit"] = []string{strconv.FormatInt(adm.Limit, 10)}
			h["Anthropic-Ratelimit-Requests-Remaining"] = []string{strconv.FormatInt(rem, 10)}
			h["Anthropic-Ratelimit-Requests-Reset"] = []string{adm.Reset.UTC().Format(time.RFC3339)}
		} else {
			h["X-Ratelimit-Limit-Requests"] = []string{strconv.FormatInt(adm.Limit, 10)}
			h["X-Ratelimit-Remaining-Requests"] = []string{strconv.FormatInt(rem, 10)}
			h["X-Ratelimit-Reset-Requests"] = []string{resetIn(adm.Reset, now)}
		}
		secs := int64((max(adm.Reset.Sub(now), 0) + time.Second - 1) / time.Second)
		h["Ratelimit-Policy"] = []string{`"requests";q=` + strconv.FormatInt(adm.Limit, 10) + `;w=` +
			strconv.FormatInt(int64(metering.RateWindow/time.Second), 10)}
		h["Ratelimit"] = []string{`"requests";r=` + strconv.FormatInt(rem, 10) + `;t=` + strconv.FormatInt(secs, 10)}
	}
	w, price := adm.Window, model.Price.InputPerMTok
	if w.LimitMicro <= 0 || price <= 0 {
		return
	}
	// Credits per million tokens = micro-credits per token.
	limit := int64(float64(w.LimitMicro) / price)
	rem := max(int64(float64(w.LimitMicro-w.UsedMicro)/price), 0)
	if anthropic {
		h["Anthropic-Ratelimit-Tokens-Limit"] = []string{strconv.FormatInt(limit, 10)}
		h["Anthropic-Ratelimit-Tokens-Remaining"] = []string{strconv.FormatInt(rem, 10)}
		h["Anthropic-Ratelimit-Tokens-Reset"] = []string{w.Reset.UTC().Format(time.RFC3339)}
		return
	}
	h["X-Ratelimit-Limit-Tokens"] = []string{strconv.FormatInt(limit, 10)}
	h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.FormatInt(rem, 10)}
	h["X-Ratelimit-Reset-Tokens"] = []string{resetIn(w.Reset, now)}
}

// resetIn is the time until reset as OpenAI writes it: a Go duration
// string to the millisecond ("1s", "6m0s", "17ms"), "0s" when past.
func resetIn(reset, now time.Time) string {
	d := reset.Sub(now)
	if d <= 0 {
		return "0s"
	}
	if d >= time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
