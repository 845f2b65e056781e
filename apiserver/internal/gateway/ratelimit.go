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
// A refused answer (429) also carries the generic X-RateLimit-Limit,
// -Remaining and -Reset (unix seconds); an admitted one does not, since the
// IETF pair and the wire format's own trios say the same. A trio is left
// out when its limit does not apply (no requests-per-minute limit; no usage
// window, usage-based pricing, or a model without a price).

// setRateLimitHeaders writes adm's rate-limit headers for a request of
// model in the wire format of anthropic or OpenAI's; refused adds the
// generic trio.
//
// It runs on every answer, so it allocates little: every value is appended
// to one buffer that becomes one string, the values are substrings of it
// held in one backing []string, and the keys are assigned in their
// canonical form (what Header.Set would store; TestRateLimitHeadersMatchSet
// compares the two).
func setRateLimitHeaders(h http.Header, adm metering.Admission, model catalog.Model, anthropic, refused bool, now time.Time) {
	w, price := adm.Window, model.Price.InputPerMTok
	tokens := w.LimitMicro > 0 && price > 0
	if adm.Limit == 0 && !tokens {
		return
	}
	var (
		arr  [320]byte
		buf  = arr[:0]
		ends [rateLimitHeaderCount]int
		keys [rateLimitHeaderCount]string
		n    int
	)
	add := func(key string) {
		keys[n], ends[n] = key, len(buf)
		n++
	}
	rem := max(adm.Remaining, 0)
	if refused && adm.Limit != 0 { // the generic trio, as Admission.Headers has it
		buf = strconv.AppendInt(buf, adm.Limit, 10)
		add("X-Ratelimit-Limit")
		buf = strconv.AppendInt(buf, rem, 10)
		add("X-Ratelimit-Remaining")
		buf = strconv.AppendInt(buf, adm.Reset.Unix(), 10)
		add("X-Ratelimit-Reset")
	}
	if adm.Limit > 0 {
		if anthropic {
			buf = strconv.AppendInt(buf, adm.Limit, 10)
			add("Anthropic-Ratelimit-Requests-Limit")
			buf = strconv.AppendInt(buf, rem, 10)
			add("Anthropic-Ratelimit-Requests-Remaining")
			buf = adm.Reset.UTC().AppendFormat(buf, time.RFC3339)
			add("Anthropic-Ratelimit-Requests-Reset")
		} else {
			buf = strconv.AppendInt(buf, adm.Limit, 10)
			add("X-Ratelimit-Limit-Requests")
			buf = strconv.AppendInt(buf, rem, 10)
			add("X-Ratelimit-Remaining-Requests")
			buf = appendResetIn(buf, adm.Reset, now)
			add("X-Ratelimit-Reset-Requests")
		}
		secs := int64((max(adm.Reset.Sub(now), 0) + time.Second - 1) / time.Second)
		buf = append(buf, `"requests";q=`...)
		buf = strconv.AppendInt(buf, adm.Limit, 10)
		buf = append(buf, `;w=`...)
		buf = strconv.AppendInt(buf, int64(metering.RateWindow/time.Second), 10)
		add("Ratelimit-Policy")
		buf = append(buf, `"requests";r=`...)
		buf = strconv.AppendInt(buf, rem, 10)
		buf = append(buf, `;t=`...)
		buf = strconv.AppendInt(buf, secs, 10)
		add("Ratelimit")
	}
	if tokens {
		// Credits per million tokens = micro-credits per token.
		limit := int64(float64(w.LimitMicro) / price)
		rem := max(int64(float64(w.LimitMicro-w.UsedMicro)/price), 0)
		if anthropic {
			buf = strconv.AppendInt(buf, limit, 10)
			add("Anthropic-Ratelimit-Tokens-Limit")
			buf = strconv.AppendInt(buf, rem, 10)
			add("Anthropic-Ratelimit-Tokens-Remaining")
			buf = w.Reset.UTC().AppendFormat(buf, time.RFC3339)
			add("Anthropic-Ratelimit-Tokens-Reset")
		} else {
			buf = strconv.AppendInt(buf, limit, 10)
			add("X-Ratelimit-Limit-Tokens")
			buf = strconv.AppendInt(buf, rem, 10)
			add("X-Ratelimit-Remaining-Tokens")
			buf = appendResetIn(buf, w.Reset, now)
			add("X-Ratelimit-Reset-Tokens")
		}
	}
	s := string(buf)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = s[start:ends[i]]
		start = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
}

// rateLimitHeaderCount is the most headers setRateLimitHeaders writes.
const rateLimitHeaderCount = 11

// resetIn is the time until reset as OpenAI writes it: a Go duration
// string to the millisecond ("1s", "6m0s", "17ms"), "0s" when past.
func resetIn(reset, now time.Time) string {
	return string(appendResetIn(nil, reset, now))
}

// appendResetIn appends resetIn's string to buf without formatting a
// time.Duration: whole seconds as Duration.String writes them ("59s",
// "6m0s", "1h0m0s"), below a second whole milliseconds ("17ms").
func appendResetIn(buf []byte, reset, now time.Time) []byte {
	d := reset.Sub(now)
	if d <= 0 {
		return append(buf, "0s"...)
	}
	if d < time.Second {
		d = d.Round(time.Millisecond)
		if d == 0 {
			return append(buf, "0s"...)
		}
		if d < time.Second {
			buf = strconv.AppendInt(buf, int64(d/time.Millisecond), 10)
			return append(buf, "ms"...)
		}
	}
	s := int64(d.Round(time.Second) / time.Second)
	if h := s / 3600; h > 0 {
		buf = strconv.AppendInt(buf, h, 10)
		buf = append(buf, 'h')
	}
	if s >= 60 {
		buf = strconv.AppendInt(buf, s%3600/60, 10)
		buf = append(buf, 'm')
	}
	buf = strconv.AppendInt(buf, s%60, 10)
	return append(buf, 's')
}
