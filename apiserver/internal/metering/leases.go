package metering

import "sync"

// Rate permits are leased from the shared counters in blocks (DESIGN note in
// the README, "Rate limits"): a replica adds n to a bucket's counter in one
// atomic statement and owns the permits of that block that fall within the
// limit. Blocks never overlap, so all replicas together admit at most the
// limit, exactly the limit when traffic asks for it; permits a replica leased
// but did not use before the minute ends are lost, so a replica can
// under-admit by at most a block and a quarter (the next block is leased
// ahead, takeOrLease: ≤ 1.25% of the limit, and 0 for limits up to 199,
// where every request takes one permit).

// leaseSize is how many permits one database round trip leases.
func leaseSize(limit int64) int64 {
	n := limit / 100
	switch {
	case n < 1:
		return 1
	case n > 64:
		return 64
	}
	return n
}

// granted is how many of the n permits ending at counter value count lie
// within limit.
func granted(count, n, limit int64) int64 {
	g := limit - (count - n)
	switch {
	case g < 0:
		return 0
	case g > n:
		return n
	}
	return g
}

type lease struct {
	window int64 // unix ms of the window start
	left   int64 // permits still owned
	count  int64 // the shared count when leased (for X-RateLimit-Remaining)
}

// leases holds one replica's unused permits per bucket, and the buckets it
// found spent: within a window the shared count only grows, so once a lease
// came back empty every later request of that window is refused without a
// database write (9,000 writes for 600 admitted requests).
type leases struct {
	mu    sync.Mutex
	m     map[string]lease
	spent map[string]int64 // bucket → window found spent
	// leasing counts this replica's lease round trips in flight per
	// bucket; settled is signalled when one ends (see takeSettled).
	leasing map[string]int
	settled *sync.Cond
}

// takeOrLease takes an owned permit of bucket, or makes the caller this
// replica's one leaser of bucket (false: the caller must lease, then end).
// While another request of this replica leases bucket it waits for that
// block rather than leasing one more: a burst of requests then leases about
// what it uses. Callers lease their buckets in one fixed order (key,
// project, workspace), so two waiting requests never hold what the other
// waits for.
//
// ahead reports that the permit taken left no more than a quarter of a
// block of size n (prefetchMin or more) and no lease of bucket is in
// flight: the caller is then bucket's leaser too (it must lease the next
// block off the request path, then end), so that a bucket in steady use
// has its next block before the last one runs out and no request waits
// for the round trip. A replica then holds at most a block and a quarter
// it cannot use when the minute ends.
func (l *leases) takeOrLease(bucket string, window, n int64) (_ lease, ok, ahead bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if le, ok := l.takeLocked(bucket, window); ok {
			if n >= prefetchMin && le.left <= n/4 && l.leasing[bucket] == 0 {
				l.startLocked(bucket)
				return le, true, true
			}
			return le, true, false
		}
		if l.leasing[bucket] == 0 {
			l.startLocked(bucket)
			return lease{}, false, false
		}
		l.wait()
	}
}

// prefetchMin is the smallest block leased ahead (takeOrLease): a smaller
// block's limit (under 800 a minute) is small enough that a replica should
// not hold permits it has no request for.
const prefetchMin = 8

// startLocked counts a lease round trip of bucket in flight; l.mu is held.
func (l *leases) startLocked(bucket string) {
	if l.leasing == nil {
		l.leasing = map[string]int{}
	}
	l.leasing[bucket]++
}

// wait waits for a lease round trip to end; l.mu is held.
func (l *leases) wait() {
	if l.settled == nil {
		l.settled = sync.NewCond(&l.mu)
	}
	l.settled.Wait()
}

// end records that a lease round trip of bucket ended (its permits, if
// any, already put).
func (l *leases) end(bucket string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leasing[bucket]--; l.leasing[bucket] <= 0 {
		delete(l.leasing, bucket)
	}
	if l.settled != nil {
		l.settled.Broadcast()
	}
}

// takeSettled is take after every lease of bucket in flight on this replica
// has ended: a request that found the shared count spent uses a block a
// concurrent request is still bringing back, rather than being refused while
// that block's permits strand unused. The caller must have ended its own
// leases first.
func (l *leases) takeSettled(bucket string, window int64) (lease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.leasing[bucket] > 0 {
		l.wait()
	}
	return l.takeLocked(bucket, window)
}

// isSpent reports whether bucket was found spent in window.
func (l *leases) isSpent(bucket string, window int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.spent[bucket]
	return ok && w == window
}

// markSpent remembers that bucket has no permit left in window.
func (l *leases) markSpent(bucket string, window int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spent == nil || len(l.spent) > 100_000 {
		l.spent = map[string]int64{}
	}
	l.spent[bucket] = window
}

// takeLocked uses one owned permit of bucket in window, if any; l.mu is
// held.
func (l *leases) takeLocked(bucket string, window int64) (lease, bool) {
	le, ok := l.m[bucket]
	if !ok || le.window != window || le.left == 0 {
		return lease{}, false
	}
	le.left--
	l.m[bucket] = le
	return le, true
}

// put adds permits leased for bucket: concurrent requests may each have
// leased a block, and none of those permits may be dropped.
func (l *leases) put(bucket string, le lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) > 100_000 {
		l.m = map[string]lease{}
	}
	if old, ok := l.m[bucket]; ok && old.window == le.window {
		le.left += old.left
		le.count = max(le.count, old.count)
	}
	l.m[bucket] = le
}
