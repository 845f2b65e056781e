package webhooklog

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/wire"
)

// ErrBadCursor is a cursor this server did not hand out.
var ErrBadCursor = errors.New("'cursor' is not a cursor of this list")

// Page is one page of the log.
type Page struct {
	Attempts   []wire.WebhookAttempt
	NextCursor string
}

// List returns up to limit attempts of a project older than cursor (""
// from the newest), newest first, each with its message's final state;
// correlationID, when set, keeps one message's attempts.
func (l *Log) List(ctx context.Context, projectID, correlationID, cursor string, limit int) (Page, error) {
	var before *store.AttemptCursor
	if cursor != "" {
		c, err := decodeCursor(cursor)
		if err != nil {
			return Page{}, err
		}
		before = &c
	}
	rows, err := l.Store.ListWebhookAttempts(ctx, projectID, correlationID, before, limit+1)
	if err != nil {
		return Page{}, err
	}
	var p Page
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		p.NextCursor = encodeCursor(store.AttemptCursor{At: last.AttemptedAt, ID: last.ID})
	}
	seen := map[string]bool{}
	var ids []string
	for _, r := range rows {
		if !seen[r.CorrelationID] {
			seen[r.CorrelationID] = true
			ids = append(ids, r.CorrelationID)
		}
	}
	states, err := l.Store.MessageStates(ctx, projectID, ids, l.now())
	if err != nil {
		return Page{}, err
	}
	p.Attempts = make([]wire.WebhookAttempt, len(rows))
	for i, r := range rows {
		p.Attempts[i] = FromRow(r)
		p.Attempts[i].MessageState = states[r.CorrelationID]
	}
	return p, nil
}

// ParseLimit reads ?limit= (default wire.AttemptsDefaultLimit, at most
// wire.AttemptsMaxLimit).
func ParseLimit(v string) (int, error) {
	if v == "" {
		return wire.AttemptsDefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, errors.New("'limit' must be a positive integer")
	}
	return min(n, wire.AttemptsMaxLimit), nil
}

func encodeCursor(c store.AttemptCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.At.UTC().UnixNano(), 10) + "." + c.ID))
}

func decodeCursor(s string) (store.AttemptCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.AttemptCursor{}, ErrBadCursor
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return store.AttemptCursor{}, ErrBadCursor
	}
	return store.AttemptCursor{At: time.Unix(0, n).UTC(), ID: id}, nil
}

// Message is one message of the console's view: its final state and its
// attempts, newest first.
type Message struct {
	CorrelationID string
	WebhookID     string
	State         string
	URL           string
	Attempts      []wire.WebhookAttempt
	// Replayable: a reply the API has (delivered or outboxed) and a
	// callback URL the log knows.
	Replayable bool
}

// Group gathers a page's attempts by message, in the order of each
// message's newest attempt.
func Group(attempts []wire.WebhookAttempt) []Message {
	var out []Message
	at := map[string]int{}
	for _, a := range attempts {
		i, ok := at[a.CorrelationID]
		if !ok {
			i = len(out)
			at[a.CorrelationID] = i
			out = append(out, Message{CorrelationID: a.CorrelationID, WebhookID: a.WebhookID, State: a.MessageState, URL: a.URL})
		}
		out[i].Attempts = append(out[i].Attempts, a)
	}
	for i := range out {
		out[i].Replayable = replayableState(out[i].State) && out[i].URL != ""
	}
	return out
}

func replayableState(s string) bool {
	return s == wire.MessageDelivered || s == wire.MessageInOutbox || s == wire.MessageFetched
}

// EndpointHealth is the wire form of an endpoint row.
func EndpointHealth(r store.WebhookEndpoint) wire.WebhookEndpointHealth {
	e := wire.WebhookEndpointHealth{Endpoint: r.Endpoint, ConsecutiveFailures: r.ConsecutiveFailures,
		Failing: r.DisabledAt != nil, LastError: r.LastError, LastAttemptAt: r.LastAttemptAt.UTC()}
	if r.FailingSince != nil {
		e.FailingSince = r.FailingSince.UTC()
	}
	if r.DisabledAt != nil {
		e.DisabledAt = r.DisabledAt.UTC()
	}
	return e
}

// PodTimeout bounds a replay or test through the pod: one callback attempt
// (30 s by default) and a margin.
const PodTimeout = 45 * time.Second
