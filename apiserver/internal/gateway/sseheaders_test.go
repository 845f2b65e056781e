package gateway

import (
	"net/http"
	"reflect"
	"testing"
)

// setSSEHeaders writes what one Header.Set per header writes, and a value
// added to one header leaves the others as they were.
func TestSSEHeadersMatchSet(t *testing.T) {
	for _, connection := range []string{"keep-alive", "close"} {
		want, got := http.Header{}, http.Header{}
		want.Set("content-type", "text/event-stream")
		want.Set("cache-control", "no-cache")
		want.Set("connection", connection)
		want.Set("x-accel-buffering", "no")
		setSSEHeaders(got, connection)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("connection %s: got %v, want %v", connection, got, want)
		}
		got.Add("Content-Type", "x")
		if got.Get("Cache-Control") != "no-cache" || got.Get("Connection") != connection {
			t.Errorf("an Add to Content-Type changed the others: %v", got)
		}
	}
}
