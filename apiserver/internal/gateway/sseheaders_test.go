package gateway

import (
	"net/http"
	"reflect"
	"testing"
)

// setSSEHeaders writes what one Header.Set per header writes, and a value
// added to one header leaves the others as they were.
func TestSSEHeadersMatchSet(t *testing.T) {
	for _, closing := range []bool{false, true} {
		want, got := http.Header{}, http.Header{}
		want.Set("content-type", "text/event-stream")
		want.Set("cache-control", "no-cache")
		if closing {
			want.Set("connection", "close")
		}
		want.Set("x-accel-buffering", "no")
		setSSEHeaders(got, closing)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("closing %v: got %v, want %v", closing, got, want)
		}
		got.Add("Content-Type", "x")
		if got.Get("Cache-Control") != "no-cache" || got.Get("X-Accel-Buffering") != "no" || (got.Get("Connection") == "close") != closing {
			t.Errorf("an Add to Content-Type changed the others: %v", got)
		}
	}
}
