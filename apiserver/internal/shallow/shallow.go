// Package shallow runs a deep call (an ORM query) on a short-lived goroutine,
// so that a long-lived goroutine — a request that goes on to relay a stream
// for minutes (spec 9, docs/performance.md) — never grows its own stack for
// it. The runtime shrinks a stack only while less than a quarter of it is in
// use, so a streaming goroutine whose stack once grew past 8 KiB keeps
// 16 KiB for the stream's whole life; gorm's call chain alone is about
// 5 KiB deep.
package shallow

import "fmt"

// Call returns f's results, computed on a new goroutine that ends with
// the call. A panic in f is raised again in the caller (where the
// request's recovery middleware sees it).
func Call[T any](f func() (T, error)) (T, error) {
	type result struct {
		v     T
		err   error
		panic any
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			ch <- r
		}()
		r.v, r.err = f()
	}()
	r := <-ch
	if r.panic != nil {
		panic(fmt.Sprintf("shallow.Call: %v", r.panic))
	}
	return r.v, r.err
}
