// Package chans holds the small idioms of done channels (closed to signal,
// nothing ever sent) the binaries share: asking whether one is closed yet,
// and a ticker loop that a done channel ends.
package chans

import "time"

// Closed reports, without blocking, whether ch is closed (or holds a value):
// the check of a done channel that a process, a VM or a connection closes
// when it ends.
func Closed[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Every calls tick every interval (first after one interval) until done is
// closed or tick returns false.
func Every(done <-chan struct{}, interval time.Duration, tick func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if !tick() {
			return
		}
	}
}
