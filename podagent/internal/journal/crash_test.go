package journal_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc/podagent/internal/activity"
	"github.com/svc-dev/svc/podagent/internal/checkpoints"
	"github.com/svc-dev/svc/podagent/internal/handover"
	"github.com/svc-dev/svc/podagent/internal/inbox"
	"github.com/svc-dev/svc/podagent/internal/journal"
	"github.com/svc-dev/svc/podagent/internal/outbox"
	"github.com/svc-dev/svc/shared/internalapi"
	"github.com/svc-dev/svc/shared/wire"
)

// The crash test's child: the test binary run again with this variable set
// to the journal's state directory.
const crashChildEnv = "SVC_TEST_JOURNAL_CRASH_DIR"

// opsPerMessage is the number of journal writes of one message's life
// (step), every kind of entry among them.
const opsPerMessage = 9

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// views are the pod's typed views over one journal, as the pod opens them.
type views struct {
	db       *journal.DB
	inbox    *inbox.Journal
	queue    *handover.Queue
	recorder *checkpoints.Recorder
	relay    *outbox.Relay
	activity *activity.Log
}

func openViews(dir string) (*views, error) {
	db, err := journal.OpenState(dir, journal.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	v := &views{db: db}
	var bad []string
	if v.inbox, bad, err = inbox.Open(db); err != nil || len(bad) > 0 {
		return nil, fmt.Errorf("inbox: %v, bad %v", err, bad)
	}
	if v.queue, err = handover.OpenQueue(db, handover.QueueOptions{RetryMin: time.Hour}); err != nil {
		return nil, err
	}
	if v.recorder, err = checkpoints.Open(v.queue, nil, nil); err != nil {
		return nil, err
	}
	// An API nobody answers: the outbox keeps every message.
	if v.relay, err = outbox.OpenRelay(outbox.RelayOptions{Queue: v.queue,
		Poster: &internalapi.Client{BaseURL: "http://127.0.0.1:1", ProjectID: "p", Token: "t"}}); err != nil {
		return nil, err
	}
	v.activity = activity.New(func() time.Time { return t0 })
	return v, v.activity.Persist(db)
}

func (v *views) close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = v.relay.Close(ctx)
	_ = v.queue.Close(ctx)
	_ = v.db.Close()
}

// step is journal write n (0, 1, ...): message n/opsPerMessage goes
// through the life a webhook message, its turn's commit and its reply have
// in the pod.
func step(v *views, n int) error {
	i := n / opsPerMessage
	corr, sha, act := fmt.Sprintf("cor_%03d", i), fmt.Sprintf("%040d", i), fmt.Sprintf("act_%03d", i)
	switch n % opsPerMessage {
	case 0:
		return v.inbox.Accept(inbox.Entry{CorrelationID: corr, ChannelID: "ch",
			WebhookIncoming: wire.WebhookIncoming{Message: "m " + corr, CallbackURL: "https://x/cb"},
			AcceptedAt:      t0.Add(time.Duration(i) * time.Second)})
	case 1:
		_, err := v.inbox.CountMessage()
		return err
	case 2:
		v.activity.Add(wire.ActivityEvent{ID: act, Direction: wire.DirectionInbound, CorrelationID: corr, Status: wire.ActivityProcessing})
		return nil
	case 3:
		_, err := v.inbox.Update(corr, func(e *inbox.Entry) { e.Runs++ })
		return err
	case 4:
		_, err := v.inbox.Update(corr, func(e *inbox.Entry) { e.State, e.Reply = inbox.StateReplied, "reply "+corr })
		return err
	case 5:
		return v.recorder.Remember(wire.CheckpointRecord{CommitSHA: sha, Turn: int64(i + 1)})
	case 6:
		return v.recorder.MarkPersisted([]string{sha})
	case 7:
		v.relay.Put("ch", wire.OutboxMessage{OutboxReply: wire.OutboxReply{CorrelationID: corr, Reply: "reply " + corr,
			CreatedAt: t0.Add(time.Duration(i) * time.Second)}})
		return nil
	default:
		if i%2 == 0 { // the callback answered: the message leaves the inbox
			return v.inbox.Done(corr)
		}
		v.activity.Finish(act, wire.ActivityReplied, "")
		return nil
	}
}

// state is what the journal holds, in the words of the views.
type state struct {
	Inbox       map[string]string // correlationId → state/runs/reply
	Count       int64
	Checkpoints []string // sha/persisted, commit order
	Outbox      []string // correlation ids
	Activity    []string // id/status, newest first
}

func stateOf(t *testing.T, v *views) state {
	t.Helper()
	s := state{Inbox: map[string]string{}, Count: v.inbox.Counters().MessageCount}
	for _, e := range v.inbox.Pending() {
		s.Inbox[e.CorrelationID] = fmt.Sprintf("%s/%d/%s", e.State, e.Runs, e.Reply)
	}
	for _, e := range v.recorder.Pending() {
		s.Checkpoints = append(s.Checkpoints, fmt.Sprintf("%s/%t", e.Record.CommitSHA, e.Persisted))
	}
	items, err := handover.Journaled(v.db, handover.Outbox)
	if err != nil {
		t.Fatalf("outbox: %v", err)
	}
	for _, it := range items {
		s.Outbox = append(s.Outbox, it.ID)
	}
	for _, e := range v.activity.List() {
		s.Activity = append(s.Activity, e.ID+"/"+e.Status)
	}
	return s
}

// model is the state after the first n writes, computed without a journal.
func model(n int) state {
	s := state{Inbox: map[string]string{}}
	var acts []string // oldest first
	for k := range n {
		i := k / opsPerMessage
		corr, sha, act := fmt.Sprintf("cor_%03d", i), fmt.Sprintf("%040d", i), fmt.Sprintf("act_%03d", i)
		switch k % opsPerMessage {
		case 0:
			s.Inbox[corr] = "accepted/0/"
		case 1:
			s.Count++
		case 2:
			acts = append(acts, act+"/"+wire.ActivityProcessing)
		case 3:
			s.Inbox[corr] = "accepted/1/"
		case 4:
			s.Inbox[corr] = "replied/1/reply " + corr
		case 5:
			s.Checkpoints = append(s.Checkpoints, sha+"/false")
		case 6:
			s.Checkpoints[len(s.Checkpoints)-1] = sha + "/true"
		case 7:
			s.Outbox = append(s.Outbox, corr)
		default:
			if i%2 == 0 {
				delete(s.Inbox, corr)
			} else {
				acts[len(acts)-1] = act + "/" + wire.ActivityReplied
			}
		}
	}
	for j := len(acts) - 1; j >= 0 && len(s.Activity) < activity.Size; j-- {
		s.Activity = append(s.Activity, acts[j])
	}
	return s
}

// crashChild writes steps until it is killed, printing "ACK n" once write
// n returned.
func crashChild(dir string) {
	v, err := openViews(dir)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	for n := range 100 * opsPerMessage {
		if err := step(v, n); err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ACK", n)
	}
	os.Exit(0)
}

// A pod killed with SIGKILL at any point between (or in the middle of)
// journal writes loses no acknowledged write of any kind — accepted
// messages, their runs and replies, messageCount, checkpoint records and
// their persisted mark, outbox messages, the activity window — and shows
// nothing half-written: after the kill the journal is exactly the state of
// the acknowledged writes, or of those plus the one in flight. The journal
// then goes on being written and read.
func TestCrashLosesNoAcknowledgedEntry(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	t.Parallel()
	// Kill after each of the nine kinds of write, and later in the life
	// of a message (the child writes on while the parent reads and kills).
	for _, killAfter := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 23, 58} {
		t.Run(strconv.Itoa(killAfter), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			acked := runAndKill(t, dir, killAfter)
			t.Logf("killed after %d acknowledged writes", acked)
			v, err := openViews(dir)
			if err != nil {
				t.Fatal(err)
			}
			if f := v.db.SetAsideFile(); f != "" {
				t.Fatalf("the journal was set aside as corrupt: %s", f)
			}
			if aside, err := v.db.SetAsideEntries(); err != nil || len(aside) > 0 {
				t.Fatalf("entries set aside: %v %v", aside, err)
			}
			got := stateOf(t, v)
			n := acked
			if !reflect.DeepEqual(got, model(n)) {
				n++ // the write in flight at the kill may have committed
				if !reflect.DeepEqual(got, model(n)) {
					t.Fatalf("after %d acknowledged writes the journal holds\n%+v\nwant\n%+v\nor\n%+v", acked, got, model(acked), model(acked+1))
				}
			}
			// The journal goes on: ten more writes, a clean restart, all there.
			for k := n; k < n+10; k++ {
				if err := step(v, k); err != nil {
					t.Fatal(err)
				}
			}
			v.close()
			v2, err := openViews(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer v2.close()
			if got := stateOf(t, v2); !reflect.DeepEqual(got, model(n+10)) {
				t.Fatalf("after the restart\n%+v\nwant\n%+v", got, model(n+10))
			}
		})
	}
}

// runAndKill runs the child on dir, kills it with SIGKILL once it
// acknowledged killAfter writes, and returns how many it acknowledged in
// all (acknowledgements still in the pipe at the kill count too).
func runAndKill(t *testing.T, dir string, killAfter int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashLosesNoAcknowledgedEntry$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked, killed := 0, false
	sc := bufio.NewScanner(out)
	var other []string
	for sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "ACK %d", &n); err != nil {
			other = append(other, sc.Text())
			continue
		}
		if n != acked {
			t.Errorf("acknowledgement %d out of order (want %d)", n, acked)
		}
		acked++
		if acked == killAfter && !killed {
			killed = true
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before %d writes: %v %v %s", killAfter, err, other, stderr.String())
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL: %v %v %s", err, other, stderr.String())
	}
	return acked
}
