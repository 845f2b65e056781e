package main

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestPrimeHeap: primeHeap leaves the heap's mappings carrying the
// kernel's huge-page advice ("hg" in smaps VmFlags) — the primed object's
// pages among them, and a large object allocated afterwards lands in
// advised memory without a new mapping of its own — and advises nothing
// outside the heap (the main thread's stack, the binary's data). Whether
// the kernel then backs them with huge pages depends on its mode and free
// memory, so that is not asserted.
func TestPrimeHeap(t *testing.T) {
	const primed = 64 << 20
	lo, hi, advised, err := primeHeap(primed)
	if err != nil {
		t.Fatal(err)
	}
	if advised < primed {
		t.Errorf("advised %d bytes, fewer than the %d primed", advised, primed)
	}
	buf := make([]byte, 8<<20) // into the primed pages
	p := uintptr(unsafe.Pointer(&buf[0]))
	if p < lo || p >= hi {
		t.Fatalf("heap object at %#x outside the heap range %#x-%#x", p, lo, hi)
	}
	var heap bool
	for r, f := range vmFlags(t) {
		hg := slices.Contains(f, "hg")
		switch {
		case r[0] <= p && p < r[1]:
			heap = true
			if !hg {
				t.Errorf("the mapping %#x-%#x holding a new object is not advised: VmFlags %v", r[0], r[1], f)
			}
		case hg && (r[0] < lo || r[1] > hi):
			t.Errorf("the mapping %#x-%#x outside the heap range is advised", r[0], r[1])
		}
	}
	if !heap {
		t.Fatalf("no mapping holds %#x", p)
	}
	buf[len(buf)-1] = 1 // buf stays alive past the checks
}

// TestAnonMapping: which /proc/self/maps lines are anonymous read-write
// memory, and their names.
func TestAnonMapping(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
		name string
	}{
		{"c000000000-c004000000 rw-p 00000000 00:00 0 ", true, ""},
		{"c000000000-c004000000 rw-p 00000000 00:00 0", true, ""},
		{"1eea0c000000-1eea10000000 rw-p 00000000 00:00 0    [anon: Go: heap]", true, heapVMAName},
		{"c004000000-c008000000 ---p 00000000 00:00 0", false, ""},
		{"7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]", false, ""},
		{"00400000-00800000 rw-p 00400000 fd:01 1234                       /usr/bin/apiserver", false, ""},
		{"c008000000-c004000000 rw-p 00000000 00:00 0", false, ""},
		{"garbage", false, ""},
	} {
		_, _, name, ok := anonMapping([]byte(tc.line))
		if ok != tc.ok || name != tc.name {
			t.Errorf("%q: anonymous %v named %q, want %v and %q", tc.line, ok, name, tc.ok, tc.name)
		}
	}
}

// vmFlags maps each mapping of the process to its smaps VmFlags.
func vmFlags(t *testing.T) map[[2]uintptr][]string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]uintptr][]string{}
	var cur [2]uintptr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			out[cur] = strings.Fields(rest)
			continue
		}
		a, rest, ok := strings.Cut(line, "-")
		if !ok || strings.Contains(a, " ") {
			continue
		}
		e, _, _ := strings.Cut(rest, " ")
		s, err1 := strconv.ParseUint(a, 16, 64)
		en, err2 := strconv.ParseUint(e, 16, 64)
		if err1 == nil && err2 == nil {
			cur = [2]uintptr{uintptr(s), uintptr(en)}
		}
	}
	return out
}
