package chans_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/chans"
)

func TestClosed(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	if chans.Closed(done) {
		t.Fatal("an open channel reads as closed")
	}
	close(done)
	if !chans.Closed(done) {
		t.Fatal("a closed channel reads as open")
	}
}
