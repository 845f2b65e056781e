// Package testhttp sends the requests of tests that only look at the status.
package testhttp

import (
	"net/http"
	"testing"
)

// Status sends req with the default client and returns the answer's status
// (the body is closed); a transport error fails t.
func Status(t testing.TB, req *http.Request) int {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
