package gateway

import (
	"encoding/json"
	"time"
)

// responseObject is a Responses API response object (the answer, and the
// response inside response.created / response.completed events).
type responseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Error              *responseError  `json:"error"`
	IncompleteDetails  *incomplete     `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int64          `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []any           `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              bool            `json:"store"`
	Temperature        *float64        `json:"temperature"`
	Text               json.RawMessage `json:"text"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              []responsesTool `json:"tools"`
	TopP               *float64        `json:"top_p"`
	Metadata           json.RawMessage `json:"metadata"`
	Usage              *responsesUsage `json:"usage"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// outputText is an output_text content part.
type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

// messageItem is an assistant message output item.
type messageItem struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Status  string `json:"status"`
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

// functionCallItem is a function_call output item.
type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// newResponse is the response object of req, without output and usage.
func newResponse(req *responsesRequest, id, model, status string, created int64) *responseObject {
	r := &responseObject{ID: id, Object: "response", CreatedAt: created, Status: status, Model: model,
		Output: []any{}, ParallelToolCalls: true, Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Temperature: req.Temperature, TopP: req.TopP, Tools: req.Tools,
		Text: rawOr(req.Text, `{"format":{"type":"text"}}`), ToolChoice: rawOr(req.ToolChoice, `"auto"`),
		Metadata: rawOr(req.Metadata, `{}`)}
	if req.ParallelToolCalls != nil {
		r.ParallelToolCalls = *req.ParallelToolCalls
	}
	if r.Tools == nil {
		r.Tools = []responsesTool{}
	}
	return r
}

// finishResponse sets status, incomplete details and usage from the
// upstream's finish reason and usage.
func (r *responseObject) finish(finishReason string, u *chatUsage) {
	r.Status = "completed"
	switch finishReason {
	case "length":
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	case "content_filter":
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "content_filter"}
	}
	if u != nil {
		ru := &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
			TotalTokens: u.PromptTokens + u.CompletionTokens}
		ru.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
		ru.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
		r.Usage = ru
	}
}

func (responsesCodec) answer(x *exchange, completion []byte) ([]byte, error) {
	cc, err := decodeCompletion(completion)
	if err != nil {
		return nil, err
	}
	id := newID("resp_")
	created := cc.Created
	if created == 0 {
		created = time.Now().Unix()
	}
	r := newResponse(x.req.responses, id, x.model.ID, "completed", created)
	finish := ""
	if len(cc.Choices) > 0 {
		ch := cc.Choices[0]
		finish = ch.FinishReason
		var content []any
		if ch.Message.Content != nil && *ch.Message.Content != "" {
			content = append(content, newOutputText(*ch.Message.Content))
		}
		if ch.Message.Refusal != nil && *ch.Message.Refusal != "" {
			content = append(content, map[string]string{"type": "refusal", "refusal": *ch.Message.Refusal})
		}
		if content != nil {
			r.Output = append(r.Output, messageItem{Type: "message", ID: newID("msg_"), Status: "completed",
				Role: "assistant", Content: content})
		}
		for _, tc := range ch.Message.ToolCalls {
			r.Output = append(r.Output, functionCallItem{Type: "function_call", ID: newID("fc_"), CallID: tc.ID,
				Name: tc.Function.Name, Arguments: tc.Function.Arguments, Status: "completed"})
		}
	}
	r.finish(finish, cc.Usage)
	return json.Marshal(r)
}
