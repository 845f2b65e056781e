package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// nativeResponses is a fake Responses-native provider: it answers
// POST /v1/responses with a fixed response (or its event stream) and keeps
// the bodies it received.
type nativeResponses struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
}

const nativeAnswer = `{"id":"resp_up1","object":"response","created_at":1,"status":"completed","model":"up-native",` +
	`"output":[{"type":"message","id":"msg_up1","status":"completed","role":"assistant",` +
	`"content":[{"type":"output_text","text":"native hello","annotations":[]}]}],` +
	`"usage":{"input_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens":4,` +
	`"output_tokens_details":{"reasoning_tokens":1},"total_tokens":25},"x_provider_field":"kept"}`

func newNativeResponses(t *testing.T) *nativeResponses {
	n := &nativeResponses{}
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		n.mu.Lock()
		n.bodies = append(n.bodies, body)
		n.mu.Unlock()
		if r.URL.Path != "/v1/responses" {
			http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error","code":"nf"}}`, 404)
			return
		}
		if body["stream"] != true {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, nativeAnswer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_up1","object":"response","created_at":1,"status":"in_progress","model":"up-native","output":[]}}`,
			`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_up1","output_index":0,"content_index":0,"delta":"native hello","logprobs":[]}`,
			`{"type":"response.completed","sequence_number":2,"response":` + nativeAnswer + `}`,
		} {
			typ := []string{"response.created", "response.output_text.delta", "response.completed"}[i]
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(n.Close)
	return n
}

// TestResponsesNativePassthrough: for a model whose provider is declared
// responses_native, a Responses request goes to the provider's /responses
// as the client sent it (model renamed, unknown fields kept), and the
// answer and the event stream come back untouched but for the public
// model id; usage is metered from the Responses usage.
func TestResponsesNativePassthrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	native := newNativeResponses(t)
	must(t, os.WriteFile(e.models, []byte(fmt.Sprintf(`providers:
  - {name: main, type: openai, base_url: %q, api_key_env: FAKE_UPSTREAM_KEY, responses_native: true}
models:
  - {id: svc-2-0, tier: standard, provider: main, upstream_model: up-native, price: {input_per_mtok: 3, output_per_mtok: 15}}
`, native.URL+"/v1")), 0o600))
	a := e.startAPI()
	acc := e.account("free")
	c := client(a.URL+"/v1", acc.key)
	params := responses.ResponseNewParams{Model: "svc-2-0", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	resp, err := c.Responses.New(context.Background(), params, option.WithJSONSet("x_client_field", "kept"))
	must(t, err)
	if resp.OutputText() != "native hello" || resp.Model != "svc-2-0" || resp.ID != "resp_up1" ||
		resp.JSON.ExtraFields["x_provider_field"].Raw() != `"kept"` {
		t.Fatalf("passed-through response %s", resp.RawJSON())
	}
	stream := c.Responses.NewStreaming(context.Background(), params)
	var types []string
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	must(t, stream.Err())
	if strings.Join(types, ",") != "response.created,response.output_text.delta,response.completed" ||
		final.Model != "svc-2-0" || final.Usage.OutputTokens != 4 {
		t.Fatalf("passed-through stream %v, final %s", types, final.RawJSON())
	}
	native.mu.Lock()
	first := native.bodies[0]
	native.mu.Unlock()
	if first["model"] != "up-native" || first["input"] != "hi" || first["x_client_field"] != "kept" || first["messages"] != nil {
		t.Errorf("the provider received %v, want the client's Responses body with the upstream model", first)
	}
	if u := waitUsage(t, e, acc.workspace, 2); u.prompt != 42 || u.completion != 8 || u.reasoning != 2 {
		t.Errorf("metered %+v, want 42 prompt, 8 completion, 2 reasoning tokens", u)
	}
}
