package e2e

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/svc-dev/svc/shared/testenv/fakeupstream"
)

// TestCachedTokensArePricedApart: when the upstream reports prompt tokens
// read from and written to its cache, the usage record keeps them apart
// and the credits charged use the models file's cached_input_per_mtok and
// cache_write_per_mtok; Anthropic cache_control hints reach the upstream
// untouched and Anthropic clients see the cache counts in their usage.
func TestCachedTokensArePricedApart(t *testing.T) {
	t.Parallel()
	e, a, acc := freeAccount(t)
	e.upstream.Sequence(fakeupstream.Reply{Text: "ok", PromptTokens: 1000, CachedTokens: 800, CacheWriteTokens: 100,
		CompletionTokens: 10})
	c := anthClient(a.URL, acc.key)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "svc-2-0", MaxTokens: 32,
		System: []anthropic.TextBlockParam{{Text: "a long shared document",
			CacheControl: anthropic.NewCacheControlEphemeralParam()}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("q"))}})
	must(t, err)
	if u := msg.Usage; u.InputTokens != 100 || u.CacheReadInputTokens != 800 || u.CacheCreationInputTokens != 100 || u.OutputTokens != 10 {
		t.Errorf("Anthropic usage %+v, want 100 fresh, 800 read, 100 written, 10 out", u)
	}
	sys := e.upstream.Requests()[0].Messages()[0]
	parts, _ := sys["content"].([]any)
	if len(parts) != 1 || parts[0].(map[string]any)["cache_control"].(map[string]any)["type"] != "ephemeral" {
		t.Errorf("cache_control did not reach the upstream: %v", sys)
	}

	waitUsage(t, e, acc.workspace, 1)
	tot := e.admin("usage", "show", "--workspace", acc.workspace)["totals"].(map[string]any)
	// svc-2-0: 3 per Mtok fresh input, 0.3 cached, 3.75 cache write, 15 output.
	const want = 100*3 + 800*0.3 + 100*3.75 + 10*15 // micro-credits: 1065
	if tot["cachedTokens"] != 800.0 || tot["cacheWriteTokens"] != 100.0 || tot["promptTokens"] != 1000.0 ||
		tot["creditsMicro"] != float64(want) {
		t.Fatalf("usage totals %v, want 800 cached, 100 written of 1000 prompt tokens and %v micro-credits", tot, want)
	}
}
