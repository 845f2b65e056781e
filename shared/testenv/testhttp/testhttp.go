// Package testhttp sends the HTTP requests of tests and benchmarks: one call
// that sets the bearer token, sends, reads the whole answer and closes it.
package testhttp

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Do sends req on c (http.DefaultClient when nil), with "Authorization:
// Bearer <bearer>" when bearer is not empty, and returns the response with
// its body read to the end and closed. A transport error fails t.
func Do(t testing.TB, c *http.Client, req *http.Request, bearer string) (*http.Response, []byte) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s %s: %v", req.Method, req.URL, err)
	}
	return resp, b
}

// Get is Do of a GET of url on http.DefaultClient.
func Get(t testing.TB, url, bearer string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Do(t, nil, req, bearer)
}

// Timed sends req on c, reads the body to its end, closes it and returns how
// long that took. A transport error or a status other than 200 is returned:
// a benchmark's worker goroutines report it themselves (b.Error, not b.Fatal).
func Timed(c *http.Client, req *http.Request) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return d, err
}
