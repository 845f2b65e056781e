package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/runtimes"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/webhookchannel"
	"github.com/svc-dev/svc/apiserver/internal/webhooklog"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// Bounds of the channel editor's calls to the agent.
const (
	agentReadTimeout = 10 * time.Second
	// testMessageTimeout is the sync reply window of spec 8 and a margin.
	testMessageTimeout = 125 * time.Second
)

type headerRow struct{ Name, Value string }

type channelData struct {
	Project   store.Project
	Channel   store.Channel
	HasSecret bool
	// PublicKey is the whpk_ key receivers verify v1a signatures with
	// (empty: the channel signs with its secret only).
	PublicKey   string
	NewSecret   string // shown once after a rotate or set
	Headers     []headerRow
	IncomingURL string
	Curl        string
	Owner       bool
	Live        liveData
	// The delivery log: the latest attempts by message, the
	// endpoints marked failing, and the replaced secret's overlap.
	Deliveries    []webhooklog.Message
	OlderCursor   string
	Failing       []wire.WebhookEndpointHealth
	PreviousUntil *time.Time
	LastAttempt   *wire.WebhookAttempt // of a replay or test just sent
	// CanReplayRange shows the range replay form.
	CanReplayRange bool
}

// liveData is the health and activity fragment.
type liveData struct {
	Project store.Project
	WSID    string
	Running bool
	State   string
	Health  *wire.WebhookHealth
	// Reason is why the channel is not connected (a wire.Health* value),
	// and ReasonText what it means for a caller.
	Reason, ReasonText string
	Events             []wire.ActivityEvent
	Error              string
	Checked            time.Time
	TestSent           *testResult
}

type testResult struct {
	Status int
	Reply  string
	Body   string
	OK     bool
}

// baseURL is the server's external base URL: PublicURL, or the scheme and
// host the request came to.
func (c *Console) baseURL(ec echo.Context) string {
	if c.o.PublicURL != "" {
		return strings.TrimSuffix(c.o.PublicURL, "/")
	}
	scheme := "http"
	if ec.Request().TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + ec.Request().Host
}

func (c *Console) channelData(ec echo.Context, p page, newSecret string) (channelData, error) {
	proj := projectFrom(ec)
	ctx := ec.Request().Context()
	ch, err := c.o.Store.GetChannel(ctx, proj.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return channelData{}, err
	}
	d := channelData{Project: proj, Channel: ch, HasSecret: ch.Secret != "", NewSecret: newSecret, Owner: isOwner(p)}
	if ch.SigningKey != "" {
		d.PublicKey, _ = wire.WebhookPublicKey(ch.SigningKey)
	}
	hs, _ := webhookchannel.DecodeCallbackHeaders(ch.CallbackHeaders)
	for k, v := range hs {
		d.Headers = append(d.Headers, headerRow{k, v})
	}
	sort.Slice(d.Headers, func(i, j int) bool { return d.Headers[i].Name < d.Headers[j].Name })
	d.IncomingURL = c.baseURL(ec) + "/api/projects/" + proj.ID + "/agent-proxy/agent/channels/webhook/incoming"
	secret := "<SIGNING_SECRET>"
	if newSecret != "" {
		secret = newSecret
	}
	d.Curl = fmt.Sprintf("curl -s %s \\\n  -H \"Authorization: Bearer <API_KEY>\" \\\n  -H \"X-Webhook-Secret: %s\" \\\n  -H 'Content-Type: application/json' \\\n  -d '{\"message\":\"hello agent\",\"senderId\":\"me\"}'", d.IncomingURL, secret)
	d.Live = c.live(ctx, proj, p.WS.ID, ch.Secret)
	if ch.PreviousSecretExpiresAt != nil && len(ch.PreviousSecrets(c.o.Now())) > 0 {
		d.PreviousUntil = ch.PreviousSecretExpiresAt
	}
	if err := c.deliveries(ctx, ec, proj.ID, &d); err != nil {
		return channelData{}, err
	}
	return d, nil
}

// ChannelPage is GET /console/w/{ws}/projects/{project}/channel: the
// channel editor of spec 2.5.
func (c *Console) ChannelPage(ec echo.Context) error {
	return c.channelPage(ec, http.StatusOK, "", "", "")
}

func (c *Console) channelPage(ec echo.Context, status int, newSecret, flash, errMsg string) error {
	p := newPage(ec, "Channel", "projects")
	d, err := c.channelData(ec, p, newSecret)
	if err != nil {
		return err
	}
	p.Title = d.Project.Name + " · channel"
	p.Flash, p.Error, p.Data = flash, errMsg, d
	return c.render(ec, status, "channel", p)
}

// SetSecret is POST …/channel/secret with action set (value), rotate (a
// new whsec_ secret) or clear (every external request is then refused).
func (c *Console) SetSecret(ec echo.Context) error {
	p := newPage(ec, "Channel", "projects")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	proj := projectFrom(ec)
	var secret, shown, flash string
	switch ec.FormValue("action") {
	case "set":
		secret = strings.TrimSpace(ec.FormValue("secret"))
		if len(secret) < 16 || len(secret) > 256 || strings.ContainsAny(secret, "\r\n\x00") {
			return c.channelPage(ec, http.StatusBadRequest, "", "", "A secret must be one line of 16 to 256 characters.")
		}
		shown, flash = secret, "Secret set. Requests must now send it in X-Webhook-Secret."
	case "rotate":
		overlap, err := parseOverlap(ec.FormValue("overlap"))
		if err != nil {
			return c.channelPage(ec, http.StatusBadRequest, "", "", err.Error())
		}
		secret = webhookchannel.NewSecret()
		if _, err := c.o.Store.RotateChannelSecret(ec.Request().Context(), proj.ID, secret, overlap); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		} else if err == nil {
			flash = "New secret generated; the old one stops working within a second. Copy it now: it is shown once."
			if overlap > 0 {
				flash = "New secret generated. The old one stays valid for " + overlap.String() +
					" (both accepted, callbacks carry both signatures). Copy the new one now: it is shown once."
			}
			return c.channelPage(ec, http.StatusOK, secret, flash, "")
		}
		shown, flash = secret, "New secret generated. Copy it now: it is shown once."
	case "drop-old":
		if _, err := c.o.Store.DropPreviousSecret(ec.Request().Context(), proj.ID); err != nil {
			return err
		}
		return c.channelPage(ec, http.StatusOK, "", "The previous secret was dropped: only the current one is accepted and signed with.", "")
	case "clear":
		flash = "Secret cleared: every external request to this channel is now rejected (401)."
	default:
		return c.channelPage(ec, http.StatusBadRequest, "", "", "Unknown action.")
	}
	if _, err := c.o.Store.SetChannel(ec.Request().Context(), proj.ID, &secret, nil); err != nil {
		return err
	}
	return c.channelPage(ec, http.StatusOK, shown, flash, "")
}

// SetHeaders is POST …/channel/headers with rows name[] and value[]; empty
// rows are dropped.
func (c *Console) SetHeaders(ec echo.Context) error {
	p := newPage(ec, "Channel", "projects")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	form, err := ec.FormParams()
	if err != nil {
		return c.channelPage(ec, http.StatusBadRequest, "", "", "Unreadable form.")
	}
	names, values := form["name"], form["value"]
	h := map[string]string{}
	for i, n := range names {
		n = strings.TrimSpace(n)
		v := ""
		if i < len(values) {
			v = strings.TrimSpace(values[i])
		}
		if n == "" && v == "" {
			continue
		}
		if _, dup := h[n]; dup {
			return c.channelPage(ec, http.StatusBadRequest, "", "", fmt.Sprintf("%s is given twice.", n))
		}
		h[n] = v
	}
	if err := webhookchannel.ValidateCallbackHeaders(h); err != nil {
		return c.channelPage(ec, http.StatusBadRequest, "", "", "Callback headers not saved: "+err.Error()+".")
	}
	b, _ := json.Marshal(h)
	raw := string(b)
	if _, err := c.o.Store.SetChannel(ec.Request().Context(), projectFrom(ec).ID, nil, &raw); err != nil {
		return err
	}
	return c.channelPage(ec, http.StatusOK, "", fmt.Sprintf("Callback headers saved (%d).", len(h)), "")
}

// ActivityFragment is GET …/channel/live: health and the last 50 events,
// polled by the page every few seconds (htmx), or a page of its own
// without JavaScript.
func (c *Console) ActivityFragment(ec echo.Context) error {
	proj := projectFrom(ec)
	p := newPage(ec, proj.Name+" · activity", "projects")
	ctx := ec.Request().Context()
	ch, err := c.o.Store.GetChannel(ctx, proj.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	p.Data = c.live(ctx, proj, p.WS.ID, ch.Secret)
	if ec.Request().Header.Get("HX-Request") == "true" {
		return c.render(ec, http.StatusOK, "channel#liveFragment", p)
	}
	return c.render(ec, http.StatusOK, "live", p)
}

// TestMessage is POST …/channel/test: sends a message to the agent as an
// external caller would (with the channel secret), in sync mode.
func (c *Console) TestMessage(ec echo.Context) error {
	proj := projectFrom(ec)
	p := newPage(ec, proj.Name+" · activity", "projects")
	if err := c.ownerOnly(ec, p); err != nil {
		return err
	}
	ctx := ec.Request().Context()
	ch, err := c.o.Store.GetChannel(ctx, proj.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	msg := strings.TrimSpace(ec.FormValue("message"))
	if msg == "" {
		msg = "Test message from the console"
	}
	res := &testResult{}
	pod, err := c.pod(ctx, proj, testMessageTimeout)
	if err == nil {
		var reply wire.WebhookReply
		reply, err = pod.WebhookSend(ctx, ch.Secret, wire.WebhookIncoming{Message: msg, SenderID: "console:" + p.User.ID,
			SenderName: p.User.Email, Metadata: json.RawMessage(`{"source":"console-test"}`)})
		res.Status, res.OK, res.Reply = http.StatusOK, err == nil, reply.Reply
	}
	if err != nil {
		res.OK, res.Body = false, agentError(err)
		if se, ok := internalapi.AsStatus(err); ok {
			res.Status = se.Status
		}
	}
	live := c.live(ctx, proj, p.WS.ID, ch.Secret)
	live.TestSent = res
	p.Data = live
	if ec.Request().Header.Get("HX-Request") == "true" {
		return c.render(ec, http.StatusOK, "channel#liveFragment", p)
	}
	return c.render(ec, http.StatusOK, "live", p)
}

// live reads health and activity from the project's agent when it runs;
// it does not start a stopped agent (a message does).
func (c *Console) live(ctx context.Context, proj store.Project, wsID, secret string) liveData {
	d := liveData{Project: proj, WSID: wsID, Checked: c.o.Now().UTC()}
	st := c.runtimeStatus(ctx, proj.ID)
	d.State = string(st.State)
	d.Running = st.State == runtimes.StateRunning
	if !d.Running {
		d.Reason = stateReason[st.State]
		d.ReasonText = healthReasonText[d.Reason]
		return d
	}
	pod, err := c.pod(ctx, proj, agentReadTimeout)
	if err != nil {
		d.Error = agentError(err)
		return d
	}
	h, err := pod.WebhookHealth(ctx)
	if err != nil {
		d.Error = agentError(err)
		return d
	}
	d.Health = &h
	if !h.Connected {
		d.Reason, d.ReasonText = h.Reason, healthReasonText[h.Reason]
	}
	if secret == "" {
		return d // activity needs the channel secret, and there is none
	}
	a, err := pod.WebhookActivity(ctx, secret)
	if err != nil {
		d.Error = agentError(err)
		return d
	}
	d.Events = a.Events
	return d
}

// stateReason is the channel health reason of a runtime that is not
// running (as the agent-proxy's health reports it).
var stateReason = map[runtimes.State]string{
	runtimes.StateStopped:  wire.HealthStopped,
	runtimes.StateStarting: wire.HealthStarting,
	runtimes.StateFailed:   wire.HealthStartFailed,
	runtimes.StateOffline:  wire.HealthOffline,
}

// healthReasonText says what each reason of a channel that is not
// connected means for the systems that send it messages
// (docs/webhook-delivery.md, "Health").
var healthReasonText = map[string]string{
	wire.HealthStopped: "No agent is running: it was never started, or it was stopped after being idle. " +
		"The next message starts one; health checks never do.",
	wire.HealthStarting: "The agent is starting; messages wait for it.",
	wire.HealthStartFailed: "The agent's last start failed. Messages are answered 503 agent_start_failed " +
		"with a Retry-After until a start succeeds.",
	wire.HealthOffline: "The project runs on a paired machine that is not connected. " +
		"Messages are answered 503 instance_offline until it reconnects.",
	wire.HealthFenced: "This agent lost the project to a newer one and takes no more messages; " +
		"the next message reaches the newer agent.",
	wire.HealthShuttingDown:      "The agent is stopping and writing its final flush; the next message starts a new one.",
	wire.HealthConfigUnavailable: "The agent runs but could not read this channel's settings from the API; it retries.",
	wire.HealthUnreachable:       "The agent is recorded as running but did not answer.",
}

func agentError(err error) string {
	if se, ok := internalapi.AsStatus(err); ok && se.Body.Error.Message != "" {
		return fmt.Sprintf("%d: %s", se.Status, se.Body.Error.Message)
	}
	return err.Error()
}

// pod returns the typed client of the project's agent (its runtime token,
// and the tunnel's transport for a paired machine), as the agent-proxy
// reaches it.
func (c *Console) pod(ctx context.Context, proj store.Project, timeout time.Duration) (*internalapi.PodClient, error) {
	if c.o.Runtime == nil {
		return nil, errors.New("no runtime is configured on this server")
	}
	ep, err := c.o.Runtime.Ensure(ctx, proj)
	if err != nil {
		return nil, fmt.Errorf("the agent is not reachable: %w", err)
	}
	tr := ep.Transport
	if tr == nil {
		tr = c.o.Transport
	}
	return &internalapi.PodClient{BaseURL: ep.URL.String(), Token: ep.Token, HTTP: &http.Client{Transport: tr}, Timeout: timeout}, nil
}
