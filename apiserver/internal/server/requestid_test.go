package server

import (
	"strings"
	"testing"

	"github.com/labstack/echo/v4/middleware"
)

// Generated ids are 32 hex digits, every digit is used, and 200,000 of
// them do not repeat.
func TestRequestID(t *testing.T) {
	t.Parallel()
	const hexDigits = "0123456789abcdef"
	seen := make(map[string]struct{}, 200_000)
	used := map[rune]bool{}
	for range 200_000 {
		id := requestID()
		if len(id) != 32 {
			t.Fatalf("id %q: length %d, want 32", id, len(id))
		}
		for _, r := range id {
			if !strings.ContainsRune(hexDigits, r) {
				t.Fatalf("id %q: %q is not a hex digit", id, r)
			}
			used[r] = true
		}
		if _, dup := seen[id]; dup {
			t.Fatalf("id %q generated twice", id)
		}
		seen[id] = struct{}{}
	}
	if len(used) != len(hexDigits) {
		t.Errorf("%d of %d digits used", len(used), len(hexDigits))
	}
}

// BenchmarkRequestID is a generated id beside echo's default generator
// (crypto/rand), which it replaced.
func BenchmarkRequestID(b *testing.B) {
	b.Run("math-rand", func(b *testing.B) {
		for b.Loop() {
			_ = requestID()
		}
	})
	b.Run("echo", func(b *testing.B) {
		gen := middleware.DefaultRequestIDConfig.Generator
		for b.Loop() {
			_ = gen()
		}
	})
}
