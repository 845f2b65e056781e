package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/atomicfile"
)

// Keys the views and the legacy import share.
const (
	MessageCount   = "messageCount" // Counters: the webhook channel's messages (health)
	ActivityWindow = "window"       // Activity: the window, newest first
)

// The journals of earlier pods, one JSON file per promise, in the state
// directory (docs/webhook-delivery.md "The journal").
const (
	legacyInbox       = "inbox"            // <sha>.json per message, counters.state, activity.state
	legacyOutbox      = "outbox"           // <sha>.json per message, *.rejected
	legacyCheckpoints = "checkpoints.json" // one JSON array
)

// OpenState opens the journal of a state directory (stateDir/journal.db)
// and imports the JSON journals an earlier version of the pod left there
// (a pod restarted on the same volume after an upgrade), once: their
// entries are written in one transaction, then the files are removed. A
// crash between the two imports the same files again at the next start,
// which changes nothing (entries are keyed, counters take the larger
// value, checkpoints already journaled are skipped). Unreadable legacy
// files go to the set-aside bucket.
func OpenState(stateDir string, o Options) (*DB, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	d, err := Open(filepath.Join(stateDir, FileName), o)
	if err != nil {
		return nil, err
	}
	n, err := d.importLegacy(stateDir)
	if err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("journal: importing the JSON journals of %s: %w", stateDir, err)
	}
	if n > 0 {
		o.Log.Info("imported the JSON journals of an earlier pod into the journal", zap.String("file", d.path), zap.Int("entries", n))
	}
	return d, nil
}

// legacyFile is one file of a legacy journal directory.
type legacyFile struct {
	name string // relative to the state directory
	data []byte
}

func readLegacyDir(dir, rel string) ([]legacyFile, error) {
	des, err := os.ReadDir(filepath.Join(dir, rel))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []legacyFile
	for _, de := range des {
		if !de.Type().IsRegular() || strings.HasSuffix(de.Name(), ".tmp") {
			continue // a .tmp is a write that never finished: its call never returned
		}
		b, err := os.ReadFile(filepath.Join(dir, rel, de.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, legacyFile{name: rel + "/" + de.Name(), data: b})
	}
	return out, nil
}

// importLegacy imports what it finds and removes it; it returns the number
// of entries imported.
func (d *DB) importLegacy(stateDir string) (int, error) {
	inbox, err := readLegacyDir(stateDir, legacyInbox)
	if err != nil {
		return 0, err
	}
	outbox, err := readLegacyDir(stateDir, legacyOutbox)
	if err != nil {
		return 0, err
	}
	var checkpoints []byte
	cpFile := filepath.Join(stateDir, legacyCheckpoints)
	if checkpoints, err = os.ReadFile(cpFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	_, inboxDirErr := os.Stat(filepath.Join(stateDir, legacyInbox))
	_, outboxDirErr := os.Stat(filepath.Join(stateDir, legacyOutbox))
	if len(inbox)+len(outbox) == 0 && checkpoints == nil && inboxDirErr != nil && outboxDirErr != nil {
		return 0, nil
	}
	n := 0
	err = d.bolt.Update(func(tx *bolt.Tx) error {
		aside := tx.Bucket([]byte(SetAside))
		setAside := func(k Kind, reason string, f legacyFile) error {
			return aside.Put(setAsideKey(k, reason, f.name), f.data)
		}
		for _, f := range inbox {
			base := filepath.Base(f.name)
			switch {
			case base == "counters.state":
				var c struct {
					MessageCount int64 `json:"messageCount"`
				}
				if json.Unmarshal(f.data, &c) != nil {
					continue // only a count: the old journal ignored it too
				}
				b := tx.Bucket([]byte(Counters))
				if c.MessageCount > decodeCounter(b.Get([]byte(MessageCount))) {
					if err := b.Put([]byte(MessageCount), encodeCounter(c.MessageCount)); err != nil {
						return err
					}
				}
			case base == "activity.state":
				var events []json.RawMessage
				b := tx.Bucket([]byte(Activity))
				if json.Unmarshal(f.data, &events) != nil || b.Get([]byte(ActivityWindow)) != nil {
					continue // history only; a window journaled already is newer
				}
				if err := b.Put([]byte(ActivityWindow), f.data); err != nil {
					return err
				}
			case strings.HasSuffix(base, ".json"):
				if err := putKeyed(tx, Inbox, f, setAside, &n); err != nil {
					return err
				}
			default: // *.bad of the old journal
				if err := setAside(Inbox, "legacy-bad", f); err != nil {
					return err
				}
			}
		}
		for _, f := range outbox {
			var err error
			switch {
			case strings.HasSuffix(f.name, ".json"):
				err = putKeyed(tx, Outbox, f, setAside, &n)
			case strings.HasSuffix(f.name, ".rejected"):
				err = setAside(Outbox, "rejected", f)
			default:
				err = setAside(Outbox, "legacy-bad", f)
			}
			if err != nil {
				return err
			}
		}
		if checkpoints != nil {
			added, err := appendCheckpoints(tx, checkpoints)
			if err != nil {
				return setAside(Checkpoints, "legacy-bad", legacyFile{name: legacyCheckpoints, data: checkpoints})
			}
			n += added
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	// Durable in the journal: now the files go (and the temp files of
	// checkpoints.json writes that never finished).
	leftovers, _ := filepath.Glob(cpFile + ".*.tmp")
	for _, p := range append([]string{filepath.Join(stateDir, legacyInbox), filepath.Join(stateDir, legacyOutbox), cpFile}, leftovers...) {
		if err := os.RemoveAll(p); err != nil {
			return n, fmt.Errorf("imported, but removing %s failed (remove it by hand): %w", p, err)
		}
	}
	return n, atomicfile.SyncDir(stateDir)
}

// putKeyed journals a legacy entry under its correlationId, or sets it
// aside when it has none.
func putKeyed(tx *bolt.Tx, k Kind, f legacyFile, setAside func(Kind, string, legacyFile) error, n *int) error {
	var e struct {
		CorrelationID string `json:"correlationId"`
	}
	if json.Unmarshal(f.data, &e) != nil || e.CorrelationID == "" {
		return setAside(k, "legacy-bad", f)
	}
	*n++
	return tx.Bucket([]byte(k)).Put([]byte(e.CorrelationID), f.data)
}

// appendCheckpoints appends the entries of a legacy checkpoints.json (a
// JSON array, commit order) whose commit is not journaled yet.
func appendCheckpoints(tx *bolt.Tx, data []byte) (int, error) {
	var entries []json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil {
		return 0, err
	}
	type shaOnly struct {
		Record struct {
			CommitSHA string `json:"commitSha"`
		} `json:"record"`
	}
	shas := make([]string, len(entries))
	for i, raw := range entries { // all readable, or none is appended
		var e shaOnly
		if err := json.Unmarshal(raw, &e); err != nil || e.Record.CommitSHA == "" {
			return 0, fmt.Errorf("checkpoint entry without a commit: %s", bytes.TrimSpace(raw))
		}
		shas[i] = e.Record.CommitSHA
	}
	b := tx.Bucket([]byte(Checkpoints))
	have := map[string]bool{}
	if err := b.ForEach(func(_, v []byte) error {
		var e shaOnly
		if json.Unmarshal(v, &e) == nil {
			have[e.Record.CommitSHA] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	for i, raw := range entries {
		if have[shas[i]] {
			continue
		}
		seq, err := b.NextSequence()
		if err != nil {
			return 0, err
		}
		if err := b.Put([]byte(fmt.Sprintf("%016x", seq)), raw); err != nil {
			return 0, err
		}
		have[shas[i]] = true
		n++
	}
	return n, nil
}
