package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// otlpReceiver is a minimal OTLP/HTTP trace receiver built on the official
// proto types: each export's spans arrive on spans.
type otlpReceiver struct {
	*httptest.Server
	spans chan receivedSpan
}

type receivedSpan struct {
	name, traceID, service string
	attrs                  map[string]string // values as text (ints in decimal)
}

func newOTLPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{spans: make(chan receivedSpan, 1024)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		var in coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(raw, &in) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		for _, rs := range in.ResourceSpans {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					attrs := map[string]string{}
					for _, a := range s.Attributes {
						if v := a.GetValue(); v.GetStringValue() != "" {
							attrs[a.Key] = v.GetStringValue()
						} else {
							attrs[a.Key] = strconv.FormatInt(v.GetIntValue(), 10)
						}
					}
					select {
					case r.spans <- receivedSpan{name: s.Name, traceID: hex.EncodeToString(s.TraceId), service: service, attrs: attrs}:
					default:
					}
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// With SVC_OTEL_EXPORTER_OTLP_ENDPOINT set, a completion's spans reach a
// real OTLP/HTTP receiver in the caller's trace, and the upstream gets the
// same trace in its traceparent.
func TestTracingExportsOverOTLP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rcv := newOTLPReceiver(t)
	a := e.startAPI("SVC_OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	acc := e.account("free")
	e.upstream.Sequence(fakeupstream.Reply{Text: "ok", PromptTokens: 120, CompletionTokens: 8, CachedTokens: 100})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	_, err := client(a.URL+"/v1", acc.key).Chat.Completions.New(context.Background(), userMsg("traced"),
		option.WithHeader("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01"))
	must(t, err)
	want := map[string]bool{"POST /v1/chat/completions": false, "auth": false, "admit": false, "upstream": false, "meter": false}
	missing := len(want)
	deadline := time.After(20 * time.Second)
	for missing > 0 {
		select {
		case s := <-rcv.spans:
			if s.traceID != traceID {
				continue
			}
			if s.service != "svc-apiserver" {
				t.Fatalf("span %s from service %q", s.name, s.service)
			}
			if s.name == "POST /v1/chat/completions" {
				// The OpenTelemetry GenAI conventions on the server span.
				for k, v := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "svc-2-0",
					"gen_ai.response.model": "up-2", "gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": "8",
					"gen_ai.usage.cache_read.input_tokens": "100"} {
					if s.attrs[k] != v {
						t.Errorf("server span attribute %s = %q, want %q", k, s.attrs[k], v)
					}
				}
			}
			if seen, ok := want[s.name]; ok && !seen {
				want[s.name] = true
				missing--
			}
		case <-deadline:
			t.Fatalf("spans received in the trace: %v", want)
		}
	}
	tp := e.upstream.Requests()[0].Header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-"+traceID+"-") {
		t.Fatalf("the upstream got traceparent %q, want trace %s", tp, traceID)
	}
}
