package server_test

import "time"

// waitABit paces a poll for spans that end after the answer was sent (the
// meter span); the poll's condition, not the pause, decides.
func waitABit() { time.Sleep(10 * time.Millisecond) }
