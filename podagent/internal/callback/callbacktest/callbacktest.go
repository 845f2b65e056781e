// Package callbacktest is the receiver of async webhook callbacks the
// tests of callback and webhook point their callbackUrl at.
package callbacktest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Received is one request the Receiver answered.
type Received struct {
	Header http.Header
	Body   []byte
	Status int
}

// Receiver answers with its statuses in order (the last repeats) and the
// extra Headers, and records every request.
type Receiver struct {
	*httptest.Server
	// Headers are set on every answer; set them before the first request.
	Headers map[string]string
	// OK gets each request answered below 300 (buffered for 100).
	OK chan Received

	mu       sync.Mutex
	statuses []int
	got      []Received
}

// New starts a Receiver, closed when t ends.
func New(t testing.TB, statuses ...int) *Receiver {
	r := &Receiver{statuses: statuses, OK: make(chan Received, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		rec := Received{req.Header.Clone(), b, r.statuses[min(len(r.got), len(r.statuses)-1)]}
		r.got = append(r.got, rec)
		for k, v := range r.Headers {
			w.Header().Set(k, v)
		}
		r.mu.Unlock()
		w.WriteHeader(rec.Status)
		if rec.Status < 300 {
			r.OK <- rec
		}
	}))
	t.Cleanup(r.Close)
	return r
}

// Got returns the requests received so far.
func (r *Receiver) Got() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.got...)
}

// Refusal is a case of a delivery that does not get through: the
// receiver's statuses and the number of requests made before giving up.
type Refusal struct {
	Name     string
	Statuses []int
	Requests int
}
