package server

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// requestID is the X-Request-Id of a request that brought none: 128 random
// bits as 32 hex digits, drawn from math/rand/v2's generator (ChaCha8,
// seeded by the runtime) instead of echo's crypto/rand read per request,
// which cost more than the rest of the request's routing. An id is unique,
// not secret; usage rows are keyed by the id and the time they were
// recorded (a client's own id may repeat).
func requestID() string {
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(raw[8:], rand.Uint64())
	var b [32]byte
	hex.Encode(b[:], raw[:])
	return string(b[:])
}
