package webhook_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-dev/svc/podagent/internal/webhook"
	"github.com/svc-dev/svc/shared/wire"
)

func FuzzParseIncoming(f *testing.F) {
	for _, s := range []string{`{"message":"hi"}`, `{"message":"hi","sender_id":"a","metadata":{"k":[1,2]}}`,
		`{"message":1}`, `[]`, ``, `{"message":"x","callbackUrl":"http://a/b","metadata":null}`, `{"message":"x"} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := webhook.ParseIncoming(body)
		if err != nil {
			var e *wire.Error
			if !asError(err, &e) || e.Status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if strings.TrimSpace(in.Message) == "" {
			t.Fatal("empty message accepted")
		}
		if in.Metadata != nil {
			// RawMessage values: metadata is forwarded unchanged, so a number
			// beyond float64 (valid JSON) is still an object's value.
			var m map[string]json.RawMessage
			if json.Unmarshal(in.Metadata, &m) != nil || m == nil {
				t.Fatalf("metadata %q is not an object", in.Metadata)
			}
		}
	})
}

func asError(err error, e **wire.Error) bool {
	x, ok := err.(*wire.Error)
	*e = x
	return ok
}
