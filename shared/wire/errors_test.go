package wire

import (
	"encoding/json"
	"testing"
)

func TestTypeFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		want   string
	}{
		{400, TypeInvalidRequest}, {401, TypeAuthentication}, {402, TypeBilling}, {403, TypePermission},
		{404, TypeInvalidRequest}, {409, TypeInvalidRequest}, {429, TypeRateLimit}, {500, TypeServer},
		{502, TypeServer}, {503, TypeServer}, {504, TypeServer},
	} {
		if got := TypeFor(tc.status); got != tc.want {
			t.Errorf("TypeFor(%d) = %q, want %q", tc.status, got, tc.want)
		}
	}
}

func TestResolveAndBody(t *testing.T) {
	t.Parallel()
	table := map[string]int{"fenced": 409}
	shared := &Error{Code: "fenced", Message: "m", CorrelationID: "cor_1"}
	got := shared.Resolve(table)
	if got.Status != 409 || got.Type != TypeInvalidRequest {
		t.Fatalf("resolved %+v", got)
	}
	if shared.Status != 0 || shared.Type != "" {
		t.Fatalf("Resolve changed its receiver: %+v", shared)
	}
	if e := (&Error{Code: "unknown"}).Resolve(table); e.Status != 500 || e.Type != TypeServer {
		t.Fatalf("unknown code: %+v", e)
	}
	b, _ := json.Marshal(got.Body())
	if string(b) != `{"error":{"message":"m","type":"invalid_request_error","code":"fenced","correlationId":"cor_1"}}` {
		t.Fatalf("body %s", b)
	}
}
