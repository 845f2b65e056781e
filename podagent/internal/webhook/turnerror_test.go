package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/podagent/internal/agentloop"
	"github.com/svc-dev/svc/podagent/internal/poderr"
	"github.com/svc-dev/svc/shared/wire"
)

// Every code the agent loop ends a turn with reaches the webhook caller as
// the one envelope: the agent's code, agent_error's
// status and type (502 server_error) from wire.Codes, the plain-words
// reply and the correlationId; a model-gateway code the agent relays is
// answered the same way. The plan limits keep their own codes' statuses.
func TestTurnErrorsAreTheEnvelope(t *testing.T) {
	t.Parallel()
	turnFailed := wire.Codes["agent_error"]
	for _, tc := range []struct {
		err    error
		code   string
		status int
		typ    string
	}{
		{&agentloop.Error{Code: "gateway_unreachable"}, "gateway_unreachable", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "gateway_error", Status: 500}, "gateway_error", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "invalid_model_response"}, "invalid_model_response", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "max_iterations"}, "max_iterations", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "commit_failed"}, "commit_failed", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "turn_timeout"}, "turn_timeout", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "canceled"}, "canceled", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "internal_error"}, "internal_error", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "model_not_found", Status: 404}, "model_not_found", turnFailed.Status, turnFailed.Type},
		{http.ErrHandlerTimeout, "agent_error", turnFailed.Status, turnFailed.Type},
		{&agentloop.Error{Code: "rate_limited", Status: 429}, "rate_limited", 429, wire.TypeRateLimit},
		{&agentloop.Error{Code: "usage_limit_reached", Status: 402, ResetsAt: "2030-01-01T00:00:00Z"}, "usage_limit_reached", 402, wire.TypeBilling},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			e := echo.New()
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodPost, "/agent/channels/webhook", nil), rec)
			poderr.Write(c, turnError(tc.err, "The agent could not complete this request.", "cor_1"), nil)
			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("not the envelope: %d %s", rec.Code, rec.Body)
			}
			if rec.Code != tc.status || body.Error.Code != tc.code || body.Error.Type != tc.typ ||
				body.Error.Message == "" || body.Error.CorrelationID != "cor_1" {
				t.Fatalf("got %d %s, want %d %s %s", rec.Code, rec.Body, tc.status, tc.typ, tc.code)
			}
		})
	}
}
