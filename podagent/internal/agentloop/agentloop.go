// Package agentloop is the project's agent: an OpenAI tool-calling loop
// against the API gateway's internal completions route
// (POST {SVC_API_URL}/internal/projects/{id}/chat/completions, runtime
// token as bearer, metered to the project's workspace), with the tools
// list_files, read_file, write_file and delete_file confined to the
// workspace. Iterations are bounded and one turn runs at a time. The loop
// only talks to the model and runs tools: it reports whether a tool changed
// a file, and package turn, the one owner of a turn's order, journals the
// reply and commits.
package agentloop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/wire"
)

// Defaults of Options.
const (
	DefaultModel         = "svc-2-0"
	DefaultMaxIterations = 20
	DefaultCallTimeout   = 5 * time.Minute
)

// DefaultSystemPrompt is the agent's standing instruction.
const DefaultSystemPrompt = "You are the agent of a software project. You work on the project's files with the tools " +
	"list_files, read_file, write_file and delete_file; paths are relative to the project's root and the .git " +
	"directory is off limits. Messages reach you through a webhook channel from an external system. Do what the " +
	"message asks, then answer with a short, plain reply for the sender."

// Options configure an Agent.
type Options struct {
	// APIURL is SVC_API_URL; the loop posts to
	// {APIURL}/internal/projects/{ProjectID}/chat/completions.
	APIURL    string
	ProjectID string
	Token     string // runtime token
	Model     string
	HTTP      *http.Client
	// Workspace is the project's work tree.
	Workspace string
	// MaxIterations bounds model calls per turn.
	MaxIterations int
	// CallTimeout bounds one gateway call.
	CallTimeout  time.Duration
	SystemPrompt string
	Log          *zap.Logger
}

// Request is one inbound message.
type Request struct {
	Message       string
	SenderID      string
	SenderName    string
	Channel       string // "webhook"
	CorrelationID string
	// Metadata is the caller's metadata object, forwarded unchanged.
	Metadata json.RawMessage
	// WaitForLimits makes a model call refused by a plan limit (429, or
	// 402 with resets_at) wait for it and retry within the turn's deadline
	// (an accepted async message); without it the error ends the turn.
	WaitForLimits bool
}

// Result is the outcome of a turn. Reply is always set, also with an error
// (then it explains the failure in plain words). CommitSHA is set by the
// turn's commit (package turn), never by the loop.
type Result struct {
	Reply      string
	CommitSHA  string
	Iterations int
	Changed    bool
}

// Error is a failed turn.
type Error struct {
	// Code: gateway_unreachable, gateway_error or the gateway's own code
	// (usage_limit_reached, rate_limited, …), invalid_model_response,
	// max_iterations, commit_failed (set by package turn), turn_timeout, canceled,
	// insufficient_storage (a tool call hit a full workspace disk).
	Code    string
	Message string
	// Status is the gateway's HTTP status, when it answered.
	Status int
	// RetryAfter (a 429's Retry-After) and ResetsAt (a 402's resets_at)
	// say when a plan limit lifts (limits.go).
	RetryAfter time.Duration
	ResetsAt   string
	Cause      error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("agent %s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("agent %s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// Agent runs turns. Safe for concurrent use; turns are serialised.
type Agent struct {
	o    Options
	ws   *Workspace
	turn chan struct{} // one turn at a time per project
	log  *zap.Logger
}

// New opens the workspace and returns an agent.
func New(o Options) (*Agent, error) {
	if o.Model == "" {
		o.Model = DefaultModel
	}
	o.MaxIterations = settings.PositiveOr(o.MaxIterations, DefaultMaxIterations)
	o.CallTimeout = settings.PositiveOr(o.CallTimeout, DefaultCallTimeout)
	if o.SystemPrompt == "" {
		o.SystemPrompt = DefaultSystemPrompt
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{}
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	ws, err := OpenWorkspace(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("agentloop: workspace: %w", err)
	}
	return &Agent{o: o, ws: ws, turn: make(chan struct{}, 1), log: o.Log.Named("agentloop")}, nil
}

// Close releases the workspace.
func (a *Agent) Close() error { return a.ws.Close() }

// Workspace returns the tools' workspace.
func (a *Agent) Workspace() *Workspace { return a.ws }

// Run is the agent's part of a turn: it waits for the previous turn to end
// and loops over model calls and tool calls. Result.Changed says whether a
// tool changed a file; committing is the caller's (package turn).
func (a *Agent) Run(ctx context.Context, req Request) (Result, error) {
	select {
	case a.turn <- struct{}{}:
	case <-ctx.Done():
		return Failed(Result{}, ContextError(ctx))
	}
	defer func() { <-a.turn }()

	res, err := a.loop(ctx, req)
	if err != nil {
		return Failed(res, err)
	}
	return res, nil
}

// Failed is the outcome of a failed turn: res with a reply that explains
// err in plain words, and err as an *Error (internal_error unless it is one).
func Failed(res Result, err error) (Result, error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: "internal_error", Message: "the agent failed", Cause: err}
	}
	res.Reply = "The agent could not complete this request (" + e.Code + "): " + e.Message + "."
	return res, e
}

// ContextError is the *Error of a turn whose context ended: turn_timeout
// or canceled.
func ContextError(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Code: "turn_timeout", Message: "the turn took longer than allowed", Cause: ctx.Err()}
	}
	return &Error{Code: "canceled", Message: "the turn was canceled", Cause: ctx.Err()}
}

// CommitMessage is the commit message of a turn for req: the channel and
// the message's first line, at most 72 characters.
func CommitMessage(req Request) string {
	m := strings.TrimSpace(req.Message)
	if i := strings.IndexByte(m, '\n'); i >= 0 {
		m = m[:i]
	}
	if utf8.RuneCountInString(m) > 72 {
		m = string([]rune(m)[:71]) + "…"
	}
	ch := req.Channel
	if ch == "" {
		ch = "webhook"
	}
	return ch + ": " + m
}

// contextMessage tells the model where the message comes from; metadata is
// embedded byte for byte as the caller sent it.
func contextMessage(req Request) string {
	var b strings.Builder
	b.WriteString("Message context (JSON): {\"channel\":")
	ch := req.Channel
	if ch == "" {
		ch = "webhook"
	}
	writeJSON(&b, ch)
	if req.SenderID != "" {
		b.WriteString(",\"senderId\":")
		writeJSON(&b, req.SenderID)
	}
	if req.SenderName != "" {
		b.WriteString(",\"senderName\":")
		writeJSON(&b, req.SenderName)
	}
	if req.CorrelationID != "" {
		b.WriteString(",\"correlationId\":")
		writeJSON(&b, req.CorrelationID)
	}
	if len(req.Metadata) > 0 {
		b.WriteString(",\"metadata\":")
		b.Write(req.Metadata)
	}
	b.WriteString("}")
	return b.String()
}

func writeJSON(b *strings.Builder, s string) {
	j, _ := json.Marshal(s)
	b.Write(j)
}

// OpenAI chat-completions wire format (the subset the loop uses).
type message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatRequest struct {
	Model    string          `json:"model"`
	Messages []message       `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

type chatResponse struct {
	Choices []struct {
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
}

func (a *Agent) loop(ctx context.Context, req Request) (Result, error) {
	var res Result
	msgs := []message{
		{Role: "system", Content: a.o.SystemPrompt},
		{Role: "system", Content: contextMessage(req)},
		{Role: "user", Content: req.Message},
	}
	for res.Iterations < a.o.MaxIterations {
		if ctx.Err() != nil {
			return res, ContextError(ctx)
		}
		res.Iterations++
		resp, err := a.completeWaiting(ctx, msgs, req.WaitForLimits, req.CorrelationID)
		if err != nil {
			return res, err
		}
		if len(resp.Choices) == 0 {
			return res, &Error{Code: "invalid_model_response", Message: "the model answered without a choice"}
		}
		m := resp.Choices[0].Message
		m.Role = "assistant"
		msgs = append(msgs, m)
		if len(m.ToolCalls) == 0 {
			res.Reply = m.Content
			return res, nil
		}
		for _, tc := range m.ToolCalls {
			out, changed, err := a.ws.call(tc.Function.Name, tc.Function.Arguments)
			if wire.DiskFull(err) {
				// The model cannot free a disk: the turn fails (507 to a
				// sync caller) and what it left in the work tree is
				// committed by the next turn once space is freed.
				return res, &Error{Code: "insufficient_storage", Message: "the workspace disk is full", Cause: err}
			}
			if changed {
				res.Changed = true
			}
			a.log.Debug("tool call", zap.String("tool", tc.Function.Name), zap.Bool("changed", changed),
				zap.String("correlationId", req.CorrelationID))
			msgs = append(msgs, message{Role: "tool", ToolCallID: tc.ID, Content: out})
		}
	}
	return res, &Error{Code: "max_iterations", Message: fmt.Sprintf("the agent stopped after %d model calls without a final answer", a.o.MaxIterations)}
}

func (a *Agent) complete(ctx context.Context, msgs []message) (*chatResponse, error) {
	body, err := json.Marshal(chatRequest{Model: a.o.Model, Messages: msgs, Tools: toolDefs})
	if err != nil {
		return nil, &Error{Code: "internal_error", Message: "encoding the request", Cause: err}
	}
	cctx, cancel := context.WithTimeout(ctx, a.o.CallTimeout)
	defer cancel()
	u := internalapi.ProjectURL(a.o.APIURL, a.o.ProjectID, internalapi.PathChatCompletions)
	hreq, err := http.NewRequestWithContext(cctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Code: "gateway_unreachable", Message: "invalid SVC_API_URL", Cause: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+a.o.Token)
	resp, err := a.o.HTTP.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ContextError(ctx)
		}
		return nil, &Error{Code: "gateway_unreachable", Message: "the model gateway could not be reached", Cause: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ContextError(ctx)
		}
		return nil, &Error{Code: "gateway_unreachable", Message: "reading the model gateway's answer failed", Cause: err}
	}
	if resp.StatusCode != http.StatusOK {
		var env wire.ErrorBody
		_ = json.Unmarshal(raw, &env)
		e := &Error{Code: "gateway_error", Status: resp.StatusCode,
			Message:    fmt.Sprintf("the model gateway answered %d", resp.StatusCode),
			RetryAfter: retryAfter(resp.Header), ResetsAt: env.Error.ResetsAt}
		if env.Error.Code != "" {
			e.Code = env.Error.Code
		}
		if env.Error.Message != "" {
			e.Message = strings.TrimSuffix(env.Error.Message, ".")
		}
		return nil, e
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return nil, &Error{Code: "invalid_model_response", Message: "the model gateway's answer is not a chat completion", Cause: err}
	}
	return &cr, nil
}
