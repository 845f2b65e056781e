package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"unsafe"
)

// secretMatches is apikey.Matches without its allocations (the hash's hex
// string and the two byte-slice copies of the compare), for the check every
// request makes: the SHA-256 of secret, hex-encoded on the stack, compared
// in constant time with storedHash. Neither string's bytes are written.
func secretMatches(secret, storedHash string) bool {
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(secret), len(secret)))
	var enc [2 * sha256.Size]byte
	hex.Encode(enc[:], sum[:])
	return subtle.ConstantTimeCompare(enc[:], unsafe.Slice(unsafe.StringData(storedHash), len(storedHash))) == 1
}
