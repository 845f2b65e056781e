// Package chans holds the two idioms of done channels (closed to signal,
// nothing ever sent) the binaries share: asking whether one is closed yet,
// and a ticker loop that a done channel ends.
package chans

import "time"

// Closed reports whether done is closed, without waiting.
func Closed(done <-chan struct{}) bool {
	select {
	case <-done:
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
