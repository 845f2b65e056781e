// Package chans holds the small channel idioms the binaries share.
package chans

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
