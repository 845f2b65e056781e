// Package journal is the pod's one journal of durable promises (spec 2.5 and
// 3.3: an async 202 is a promise; spec 4.3: a commit gets its checkpoint row;
// docs/webhook-delivery.md "The journal"): accepted webhook messages and
// their replies, outbox messages the API has not taken yet, commits waiting
// to be recorded, the channel's counters and its activity window.
//
// It is one bbolt file per data directory (<workspace>/.git/svc-agent/
// journal.db, never archived), one bucket per kind of entry. Every write is
// one transaction, fsynced before it returns (bbolt's default): after a
// crash an entry is in the state of its last acknowledged write, never half
// of one. The typed views (inbox, handover.Queue and
// its views outbox.Relay, attemptlog and checkpoints, activity) hold their
// entries in memory and write through a Table.
//
// A file that is not a valid journal is set aside (renamed
// journal.db.corrupt-<time>, kept for an operator) and an empty one
// started: the pod goes on serving, an accepted message it can no longer
// answer shows in the API's outbox as unanswered after its deadline, and the
// API reconciles checkpoint rows at the next hydrate. An entry that does not
// decode is moved to the set-aside bucket in the same way (SetAside).
package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/atomicfile"
)

// FileName is the journal's file in its state directory.
const FileName = "journal.db"

// Kind names a bucket: one kind of entry.
type Kind string

// The kinds of entry.
const (
	Inbox Kind = "inbox" // accepted async messages, by correlationId
	// Handover is the one queue of what the pod hands to the API in the
	// background (package handover): outbox messages, callback attempt
	// records and checkpoint records, in the order they were queued.
	Handover Kind = "handover"
	// Outbox and Checkpoints are the hand-over buckets of earlier versions
	// (outbox messages by correlationId; commits to record, in commit
	// order): the hand-over queue moves what they hold into Handover when
	// it opens.
	Outbox      Kind = "outbox"
	Checkpoints Kind = "checkpoints"
	Counters    Kind = "counters" // named int64 counters (messageCount)
	Activity    Kind = "activity" // the activity window, one value
	// SetAside keeps what no view could use, raw, for an operator:
	// undecodable entries, unreadable files of an imported legacy journal,
	// outbox messages the API refused for good. Keys are
	// <kind>/<reason>/<key>.
	SetAside Kind = "set_aside"
)

var kinds = []Kind{Inbox, Handover, Outbox, Checkpoints, Counters, Activity, SetAside}

// DefaultLockTimeout is how long Open waits for another holder of the file.
const DefaultLockTimeout = 5 * time.Second

// ErrLocked is Open's error when another process holds the journal (one
// owner per data directory, as the workspace's own lock).
var ErrLocked = errors.New("journal: held by another process")

// Options configure Open.
type Options struct {
	// LockTimeout bounds the wait for the file lock (0: DefaultLockTimeout).
	LockTimeout time.Duration
	Log         *zap.Logger
}

// DB is an open journal. Safe for concurrent use.
type DB struct {
	bolt     *bolt.DB
	path     string
	setAside string
	group    group // ApplyGrouped's group commit
}

// Open opens (or creates) the journal file at path. A file that is not a
// valid journal is set aside and replaced by an empty one (SetAsideFile
// names it); a file held by another process is ErrLocked.
func Open(path string, o Options) (*DB, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	// Missing parents as git and the pod make them (.git, svc-agent: 0755);
	// the file itself is 0600.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	d := &DB{path: path}
	b, err := openChecked(path, o.LockTimeout)
	if err != nil && isCorrupt(err) {
		aside := fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("journal: %s is corrupt (%v) and could not be set aside: %w", path, err, rerr)
		}
		_ = atomicfile.SyncDir(filepath.Dir(path))
		o.Log.Error("the journal file is corrupt; set aside, starting an empty journal "+
			"(unanswered accepted messages show as unanswered in the API's outbox after their deadline; "+
			"checkpoint rows are reconciled at the next hydrate)",
			zap.String("file", path), zap.String("setAsideAs", aside), zap.Error(err))
		d.setAside = aside
		b, err = openChecked(path, o.LockTimeout)
	}
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %s; one owner per data directory)", ErrLocked, path, o.LockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	d.bolt = b
	return d, nil
}

// corruptError marks a file that opened but failed its consistency check.
type corruptError struct{ err error }

func (e corruptError) Error() string { return "consistency check: " + e.err.Error() }

func isCorrupt(err error) bool {
	var ce corruptError
	switch {
	case errors.As(err, &ce), errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return true
	case errors.Is(err, berrors.ErrTimeout), errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrNotExist):
		return false
	}
	// bbolt's own words for a file too short to hold its meta pages.
	return err != nil && strings.HasPrefix(err.Error(), "file size too small")
}

// openChecked opens path with bbolt, reads every page (a journal holds a
// few hundred entries: milliseconds) and creates the buckets. bbolt panics
// on a page that is not what it should be; here that is a corrupt file.
func openChecked(path string, timeout time.Duration) (b *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = corruptError{fmt.Errorf("%v", p)}
		}
		if err != nil && b != nil {
			_ = b.Close()
			b = nil
		}
	}()
	if b, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout}); err != nil {
		return nil, err
	}
	missing := false
	if err := b.View(func(tx *bolt.Tx) error {
		for _, k := range kinds {
			missing = missing || tx.Bucket([]byte(k)) == nil
		}
		return tx.ForEach(func(_ []byte, bk *bolt.Bucket) error { return walk(bk) })
	}); err != nil {
		return b, corruptError{err}
	}
	if !missing {
		return b, nil // no write (and no fsync) at start
	}
	if err := b.Update(func(tx *bolt.Tx) error {
		for _, k := range kinds {
			if _, err := tx.CreateBucketIfNotExists([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return b, err
	}
	return b, nil
}

// walk reads every key and value of bk and its nested buckets.
func walk(bk *bolt.Bucket) error {
	return bk.ForEach(func(k, v []byte) error {
		if v == nil {
			if nested := bk.Bucket(k); nested != nil {
				return walk(nested)
			}
		}
		return nil
	})
}

// Path is the journal's file.
func (d *DB) Path() string { return d.path }

// SetAsideFile names the corrupt file Open set aside ("" when none).
func (d *DB) SetAsideFile() string { return d.setAside }

// Close closes the file (idempotent); later writes fail.
func (d *DB) Close() error { return d.bolt.Close() }

// Add adds delta to the counter name and returns its new value, durably.
func (d *DB) Add(name string, delta int64) (int64, error) {
	var n int64
	err := d.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(Counters))
		n = decodeCounter(b.Get([]byte(name))) + delta
		return b.Put([]byte(name), encodeCounter(n))
	})
	return n, err
}

// Counter is the value of the counter name (0 when never set).
func (d *DB) Counter(name string) (int64, error) {
	var n int64
	err := d.bolt.View(func(tx *bolt.Tx) error {
		n = decodeCounter(tx.Bucket([]byte(Counters)).Get([]byte(name)))
		return nil
	})
	return n, err
}

func encodeCounter(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func decodeCounter(b []byte) int64 {
	if len(b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// SetAsideEntries lists the set-aside bucket: key → raw value.
func (d *DB) SetAsideEntries() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := d.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(SetAside)).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	return out, err
}

// Len is the number of entries of a kind.
func (d *DB) Len(k Kind) (int, error) {
	n := 0
	err := d.bolt.View(func(tx *bolt.Tx) error {
		n = tx.Bucket([]byte(k)).Stats().KeyN
		return nil
	})
	return n, err
}

func setAsideKey(k Kind, reason, key string) []byte {
	return []byte(string(k) + "/" + reason + "/" + key)
}

// Table is one kind of entry, each a JSON value under a string key.
type Table[T any] struct {
	db   *DB
	kind Kind
}

// TableOf is the table of kind k in d.
func TableOf[T any](d *DB, k Kind) Table[T] { return Table[T]{db: d, kind: k} }

// Item is one entry of a table.
type Item[T any] struct {
	Key   string
	Value T
}

// Put writes v under key, durably.
func (t Table[T]) Put(key string, v T) error {
	return t.PutAll([]Item[T]{{Key: key, Value: v}})
}

// PutAll writes every item in one transaction: all or none.
func (t Table[T]) PutAll(items []Item[T]) error {
	vals := make([][]byte, len(items))
	for i, it := range items {
		b, err := json.Marshal(it.Value)
		if err != nil {
			return err
		}
		vals[i] = b
	}
	return t.db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(t.kind))
		for i, it := range items {
			if err := b.Put([]byte(it.Key), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Append writes v under the table's next sequence key (16 hex digits, so
// keys sort in the order of appends) and returns the key.
func (t Table[T]) Append(v T) (string, error) {
	val, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var key string
	err = t.db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(t.kind))
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		key = fmt.Sprintf("%016x", seq)
		return b.Put([]byte(key), val)
	})
	return key, err
}

// Delete removes key, durably (no error when it is absent).
func (t Table[T]) Delete(key string) error {
	return t.db.bolt.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(t.kind)).Delete([]byte(key))
	})
}

// SetAside moves the entry key to the set-aside bucket under reason
// (durably, in one transaction).
func (t Table[T]) SetAside(key, reason string) error {
	return t.db.bolt.Update(func(tx *bolt.Tx) error {
		return moveAside(tx, t.kind, key, reason)
	})
}

// SetAsideAs is SetAside with the set-aside key given whole (the
// hand-over queue names an entry by its kind and id, not its sequence key).
func (t Table[T]) SetAsideAs(key, asideKey string) error {
	return t.db.bolt.Update(func(tx *bolt.Tx) error {
		return moveAsideAs(tx, t.kind, key, []byte(asideKey))
	})
}

func moveAside(tx *bolt.Tx, k Kind, key, reason string) error {
	return moveAsideAs(tx, k, key, setAsideKey(k, reason, key))
}

func moveAsideAs(tx *bolt.Tx, k Kind, key string, asideKey []byte) error {
	b := tx.Bucket([]byte(k))
	v := b.Get([]byte(key))
	if v == nil {
		return nil
	}
	if err := tx.Bucket([]byte(SetAside)).Put(asideKey, append([]byte(nil), v...)); err != nil {
		return err
	}
	return b.Delete([]byte(key))
}

// Get reads one entry.
func (t Table[T]) Get(key string) (v T, ok bool, err error) {
	err = t.db.bolt.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket([]byte(t.kind)).Get([]byte(key))
		if raw == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(raw, &v)
	})
	return v, ok, err
}

// Load returns every entry in key order. An entry that does not decode, or
// that valid (when set) refuses, is moved to the set-aside bucket (reason
// "bad") and its key listed in bad.
func (t Table[T]) Load(valid func(key string, v T) bool) (items []Item[T], bad []string, err error) {
	err = t.db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(t.kind)).ForEach(func(k, raw []byte) error {
			var v T
			if json.Unmarshal(raw, &v) != nil || (valid != nil && !valid(string(k), v)) {
				bad = append(bad, string(k))
				return nil
			}
			items = append(items, Item[T]{Key: string(k), Value: v})
			return nil
		})
	})
	if err != nil || len(bad) == 0 {
		return items, bad, err
	}
	err = t.db.bolt.Update(func(tx *bolt.Tx) error {
		for _, k := range bad {
			if err := moveAside(tx, t.kind, k, "bad"); err != nil {
				return err
			}
		}
		return nil
	})
	return items, bad, err
}

// Op is one write of a transaction that spans tables (DB.Apply): a put or
// a delete of one entry.
type Op struct {
	db   *DB
	kind Kind
	key  string
	val  []byte // nil: delete
}

// PutOp is Put as an Op of a later Apply.
func (t Table[T]) PutOp(key string, v T) (Op, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Op{}, err
	}
	return Op{db: t.db, kind: t.kind, key: key, val: b}, nil
}

// DeleteOp is Delete as an Op of a later Apply.
func (t Table[T]) DeleteOp(key string) Op { return Op{db: t.db, kind: t.kind, key: key} }

// DB is the journal the op writes to.
func (o Op) DB() *DB { return o.db }

// Apply writes every op in one transaction, durably: all or none (the
// outbox's copy of a reply and the end of its accepted message, for one).
// An op of another journal file fails the whole transaction.
func (d *DB) Apply(ops ...Op) error {
	for _, op := range ops {
		if op.db != d {
			return fmt.Errorf("journal: an op of %s applied to %s", op.db.Path(), d.path)
		}
	}
	return d.bolt.Update(func(tx *bolt.Tx) error { return applyOps(tx, ops) })
}

// applyOps writes ops in tx.
func applyOps(tx *bolt.Tx, ops []Op) error {
	for _, op := range ops {
		b := tx.Bucket([]byte(op.kind))
		var err error
		if op.val == nil {
			err = b.Delete([]byte(op.key))
		} else {
			err = b.Put([]byte(op.key), op.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
