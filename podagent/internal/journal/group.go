package journal

import (
	"fmt"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// group is ApplyGrouped's group commit: the callers that arrive while a
// transaction is being written wait, and the next transaction writes all of
// their ops at once, so a burst of small writes (the callback attempt
// records of many deliveries) costs a few fsyncs, not one each. A lone
// caller commits at once (no delay, unlike bbolt's Batch).
type group struct {
	mu      sync.Mutex
	busy    bool // a leader is writing
	waiting []*groupCall

	// beforeCommit and queued are test hooks.
	beforeCommit func(calls int)
	queued       func()
}

type groupCall struct {
	ops  []Op
	err  error
	wake chan bool // true: lead the next transaction; false: done
}

// ApplyGrouped is Apply (the ops of one call in one transaction, all or
// none, durable when it returns) with a group commit: calls made while
// another transaction is written share the next one. When a shared
// transaction fails, each of its calls is written alone, so one call's
// failure is never another's.
func (d *DB) ApplyGrouped(ops ...Op) error {
	for _, op := range ops {
		if op.db != d {
			return fmt.Errorf("journal: an op of %s applied to %s", op.db.Path(), d.path)
		}
	}
	g := &d.group
	c := &groupCall{ops: ops, wake: make(chan bool, 1)}
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	if g.busy {
		queued := g.queued
		g.mu.Unlock()
		if queued != nil {
			queued()
		}
		if lead := <-c.wake; !lead {
			return c.err
		}
		g.mu.Lock()
	}
	g.busy = true
	calls := g.waiting // c is among them
	g.waiting = nil
	hook := g.beforeCommit
	g.mu.Unlock()

	if hook != nil {
		hook(len(calls))
	}
	d.commitGroup(calls)

	g.mu.Lock()
	var next *groupCall
	if len(g.waiting) > 0 {
		next = g.waiting[0]
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	for _, o := range calls {
		if o != c {
			o.wake <- false
		}
	}
	if next != nil {
		next.wake <- true
	}
	return c.err
}

// commitGroup writes the calls' ops in one transaction; if it fails, each
// call alone.
func (d *DB) commitGroup(calls []*groupCall) {
	err := d.bolt.Update(func(tx *bolt.Tx) error {
		for _, c := range calls {
			if err := applyOps(tx, c.ops); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(calls) == 1 {
		for _, c := range calls {
			c.err = err
		}
		return
	}
	for _, c := range calls {
		c.err = d.bolt.Update(func(tx *bolt.Tx) error { return applyOps(tx, c.ops) })
	}
}
