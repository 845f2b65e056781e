package e2e

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// TestTranslatedStreamsCutByClientAreMeteredOnce: a Responses and a
// Messages stream whose client hangs up after the first event are still
// metered, once each, with what the upstream reported when it finished:
// the pipeline keeps reading for the usage whatever the wire format.
func TestTranslatedStreamsCutByClientAreMeteredOnce(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	holds := make(chan chan struct{}, 2)
	e.upstream.Script(func(fakeupstream.Request) fakeupstream.Reply {
		h := make(chan struct{})
		holds <- h
		return fakeupstream.Reply{Text: "a b c", PromptTokens: 50, CompletionTokens: 5, Hold: h}
	})
	ctx := context.Background()

	rctx, cancel := context.WithCancel(ctx)
	rs := client(a.URL+"/v1", acc.key).Responses.NewStreaming(rctx, responses.ResponseNewParams{Model: "svc-2-0",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("cut")}})
	if !rs.Next() || rs.Current().Type != "response.created" {
		t.Fatalf("no response.created before the cut: %v", rs.Err())
	}
	cancel()
	rs.Close()
	close(<-holds)

	mctx, mcancel := context.WithCancel(ctx)
	ac := anthClient(a.URL, acc.key)
	ms := ac.Messages.NewStreaming(mctx, anthropic.MessageNewParams{Model: "svc-2-0", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("cut"))}})
	if !ms.Next() || ms.Current().Type != "message_start" {
		t.Fatalf("no message_start before the cut: %v", ms.Err())
	}
	mcancel()
	ms.Close()
	close(<-holds)

	u := waitUsage(t, e, acc.workspace, 2)
	if rep := e.upstream.Reported(); rep.Answers != 2 || u.requests != 2 || u.prompt != rep.Prompt || u.completion != rep.Completion {
		t.Fatalf("metered %+v, upstream reported %+v: want both cut streams metered once", u, rep)
	}
}
