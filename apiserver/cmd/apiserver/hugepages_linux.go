package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The Go heap on transparent huge pages (docs/performance.md, "The heap on
// huge pages"). Most distributions run the kernel's transparent huge pages
// in "madvise" mode: only memory advised MADV_HUGEPAGE gets them, and the Go
// runtime advises none of its heap. Every first touch of a heap page is then
// a 4 KiB page fault, and a young server, whose heap grows toward five times
// its live size (DefaultGCPercent), takes several per request, each costly
// under a hypervisor's nested paging. heapHugePages advises the heap's own
// mappings instead. The advice must come before a page's first touch (a
// 2 MiB range holding one 4 KiB page stays on 4 KiB pages), and the runtime
// maps each growth of its heap afresh, without the advice, and uses it at
// once; so at start the heap is grown by primeBytes of address space — one
// large object, never touched and dropped at once, whose mapping the runtime
// keeps — and advised while still untouched. Growth past it is advised
// within hugePageInterval.

// hugePageInterval is how often new heap mappings are advised.
const hugePageInterval = time.Second

// primeBytes is the heap address space mapped and advised at start: above
// the server's heap under load (tens of MiB; docs/performance.md). Only
// address space: nothing is resident until the heap uses it.
const primeBytes = 256 << 20

// heapSpan bounds the address range the heap's mappings are looked for in:
// the runtime grows its arenas upward from a (randomized) base, so from a
// little below the first heap object, heapSpan up. Nothing else of the
// process maps there.
const heapSpan = 1 << 38

// heapVMAName is the name Go gives its heap mappings where the kernel
// supports named anonymous mappings (/proc/self/maps).
const heapVMAName = "[anon: Go: heap]"

// thpMode is the kernel's transparent huge page mode: always, madvise or
// never ("" where the kernel has none).
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	if i, j := bytes.IndexByte(b, '['), bytes.IndexByte(b, ']'); i >= 0 && j > i {
		return string(b[i+1 : j])
	}
	return ""
}

// heapRange is the range heapHugePages advises unnamed mappings in: from a
// GiB below the 64 MiB arena holding p, a heap object, heapSpan up.
func heapRange(p uintptr) (lo, hi uintptr) {
	const arena, below = 64 << 20, 1 << 30
	lo = p &^ (arena - 1)
	lo -= min(lo, below)
	return lo, lo + heapSpan
}

// adviseHeap advises MADV_HUGEPAGE every private anonymous read-write
// mapping inside [lo, hi) and every mapping named heapVMAName, and returns
// how many bytes it advised.
func adviseHeap(lo, hi uintptr) (uintptr, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	var total uintptr
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		start, end, name, ok := anonMapping(sc.Bytes())
		if !ok || (name != heapVMAName && (name != "" || start < lo || end > hi)) {
			continue
		}
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_HUGEPAGE); e != 0 {
			return total, fmt.Errorf("madvise %#x-%#x: %w", start, end, e)
		}
		total += end - start
	}
	return total, sc.Err()
}

// anonMapping parses one /proc/self/maps line ("start-end perms offset dev
// inode [name]") and says whether it is private anonymous read-write memory
// (inode 0; unnamed, or named "[anon: …]" by its owner).
func anonMapping(line []byte) (start, end uintptr, name string, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 5 || string(f[1]) != "rw-p" || string(f[4]) != "0" {
		return 0, 0, "", false
	}
	if len(f) > 5 {
		name = string(bytes.Join(f[5:], []byte{' '}))
		if !strings.HasPrefix(name, "[anon:") {
			return 0, 0, "", false // [stack], [heap] (brk), [vvar] …
		}
	}
	a, b, found := bytes.Cut(f[0], []byte{'-'})
	if !found {
		return 0, 0, "", false
	}
	s, err1 := strconv.ParseUint(string(a), 16, 64)
	e, err2 := strconv.ParseUint(string(b), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, "", false
	}
	return uintptr(s), uintptr(e), name, true
}

// primeSink holds the priming object until the heap is advised.
var primeSink []byte

// primeHeap grows the heap by n bytes of address space without touching it
// (fresh memory is known zero, so the runtime does not clear a large
// object placed there), then advises the heap, drops the object and
// collects it; its pages stay mapped, free for the heap to grow into.
func primeHeap(n uintptr) (lo, hi, advised uintptr, err error) {
	primeSink = make([]byte, n)
	lo, hi = heapRange(uintptr(unsafe.Pointer(unsafe.SliceData(primeSink)))) //nolint:gosec // the address as a number, nothing kept
	advised, err = adviseHeap(lo, hi)
	primeSink = nil
	runtime.GC()
	return lo, hi, advised, err
}

// heapHugePages primes and advises the heap, and advises its new mappings
// every hugePageInterval until ctx ends, where the kernel is in madvise mode
// and on is set; it logs what it does once.
func heapHugePages(ctx context.Context, on bool, log *zap.Logger) {
	mode := thpMode()
	if !on || mode != "madvise" {
		log.Info("heap huge pages", zap.Bool("advised", false), zap.String("kernel_mode", mode), zap.Bool("enabled", on))
		return
	}
	// Under a soft memory limit the primed object counts toward it until it
	// is collected; half the limit at most.
	_, soft := gcSettings()
	lo, hi, n, err := primeHeap(uintptr(min(primeBytes, soft/2)))
	if err != nil {
		log.Warn("heap huge pages: advising the heap failed; left to the kernel's default", zap.Error(err))
		return
	}
	log.Info("heap huge pages", zap.Bool("advised", true), zap.String("kernel_mode", mode), zap.Uint64("heap_mapped_bytes", uint64(n)))
	go func() {
		t := time.NewTicker(hugePageInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := adviseHeap(lo, hi); err != nil {
					log.Warn("heap huge pages: advising new heap mappings failed; stopped", zap.Error(err))
					return
				}
			}
		}
	}()
}
