package metering

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/svc-dev/svc/apiserver/internal/store"
)

// A database outage is not a gateway outage (docs/gateway.md, "When
// PostgreSQL is down"): usage records the database refuses are spooled —
// in memory up to SpoolMemory records, past that appended to a file under
// the data directory — and written, oldest first, when it answers again.
// Writes are idempotent (store.RecordUsageBatch skips records already
// committed), so a spool written in part and retried, or a batch whose
// commit was not acknowledged, still lands exactly once.

// SpoolMemory is how many records the spool keeps in memory before it
// appends to its file (about 300 bytes each).
const SpoolMemory = 100_000

// SpoolFile is the spool's file name in its directory.
const SpoolFile = "usage-spool.jsonl"

// spoolLine is one record in the spool file.
type spoolLine struct {
	Rec     store.UsageRecord  `json:"r"`
	Windows []store.WindowSpec `json:"w"`
}

// spool holds the batches not written yet, oldest first: the memory part,
// then the file's (every record in the file is newer than those in memory
// when it was appended; the file is drained after memory).
type spool struct {
	dir     string // "": no file (memory only; past it the writer waits)
	memMax  int    // records kept in memory (SpoolMemory)
	mem     [][]pending
	memRecs int
	// fileRecs counts the records in the file (-1: not known yet, a file
	// left by an earlier run may exist).
	fileRecs int
}

func newSpool(dir string) *spool { return &spool{dir: dir, memMax: SpoolMemory, fileRecs: -1} }

func (s *spool) path() string { return filepath.Join(s.dir, SpoolFile) }

// len is the number of records spooled (a file of an earlier run counts
// as at least one until it was drained).
func (s *spool) len() int {
	n := s.memRecs
	if s.fileRecs != 0 && s.dir != "" {
		if s.fileRecs < 0 {
			if _, err := os.Stat(s.path()); err != nil {
				s.fileRecs = 0
				return n
			}
			return n + 1
		}
		n += s.fileRecs
	}
	return n
}

// full: no room left in memory and no file to spill to.
func (s *spool) full() bool { return s.dir == "" && s.memRecs >= s.memMax }

// push spools a batch: in memory while there is room, else in the file.
func (s *spool) push(b []pending) error {
	if s.memRecs+len(b) <= s.memMax || s.dir == "" {
		s.mem = append(s.mem, append([]pending(nil), b...))
		s.memRecs += len(b)
		return nil
	}
	return s.appendFile(b)
}

func (s *spool) appendFile(b []pending) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, p := range b {
		if err := enc.Encode(spoolLine{Rec: p.rec, Windows: p.windows}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	// Durable before the records leave memory.
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if s.fileRecs >= 0 {
		s.fileRecs += len(b)
	}
	return f.Close()
}

// spill moves the memory part to the file (at shutdown: what is not
// written survives a restart); false when there is no file.
func (s *spool) spill() error {
	if s.dir == "" || s.memRecs == 0 {
		return nil
	}
	// The file's records are newer: memory goes first in a new file.
	old, err := os.ReadFile(s.path())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp := s.path() + ".tmp"
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	n := 0
	for _, b := range s.mem {
		for _, p := range b {
			if err := enc.Encode(spoolLine{Rec: p.rec, Windows: p.windows}); err != nil {
				f.Close()
				return err
			}
			n++
		}
	}
	if _, err := w.Write(old); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path()); err != nil {
		return err
	}
	s.mem, s.memRecs = nil, 0
	if s.fileRecs >= 0 {
		s.fileRecs += n
	}
	return nil
}

// drain writes the spool oldest first through write; it stops at the
// first failure (what was written stays written: the next drain skips it).
func (s *spool) drain(write func([]pending) error) error {
	for len(s.mem) > 0 {
		if err := write(s.mem[0]); err != nil {
			return err
		}
		s.memRecs -= len(s.mem[0])
		s.mem[0] = nil
		s.mem = s.mem[1:]
	}
	if s.dir == "" || s.fileRecs == 0 {
		return nil
	}
	f, err := os.Open(s.path())
	if errors.Is(err, os.ErrNotExist) {
		s.fileRecs = 0
		return nil
	}
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReader(f))
	batch := make([]pending, 0, maxBatch)
	for {
		var l spoolLine
		err := dec.Decode(&l)
		if err == nil {
			batch = append(batch, pending{rec: l.Rec, windows: l.Windows})
		}
		if len(batch) == maxBatch || (err != nil && len(batch) > 0) {
			if werr := write(batch); werr != nil {
				f.Close()
				return werr
			}
			batch = batch[:0]
		}
		if err != nil {
			// The end, or a line torn by a crash while it was appended
			// (the last append only): everything before it is written.
			f.Close()
			if rerr := os.Remove(s.path()); rerr != nil {
				return rerr
			}
			s.fileRecs = 0
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("metering: usage spool %s ends in a torn line (dropped): %w", s.path(), err)
			}
			return nil
		}
	}
}
