// Package testhook lets an end-to-end test stop a real podagent process at
// an exact point (for kill -9 and shutdown tests) without sleeps.
//
// When SVC_TEST_PAUSE_AT names the point and the test created
// $SVC_TEST_HOOK_DIR/<point> as a FIFO, Reach writes the point's name to it;
// the test, blocked reading it, learns exactly when the pod got there. Then,
// if $SVC_TEST_HOOK_DIR/<point>.go is a FIFO, Reach waits until the test
// writes to it and continues; otherwise it blocks forever (the test kills the
// process). Without the variables, or without the FIFO on disk, Reach does
// nothing: the environment alone cannot stop a production pod.
package testhook

import (
	"os"
	"path/filepath"
	"strings"
)

// Points used by the pod, and the environment variables.
const (
	AfterCommit    = "after-commit"    // the turn's commit exists locally; nothing persisted yet
	MidUpload      = "mid-upload"      // half of repo.git.tar.gz (or of an increment) has been sent to the store
	AfterIncrement = "after-increment" // the turn's increment is stored; no manifest names it yet
	AfterManifest  = "after-manifest"  // the manifest naming the turn is stored; durable.json not yet written
	CompactBase    = "compact-base"    // a compaction stored the new base; the manifest still names the old one
	CompactRepoint = "compact-repoint" // a compaction re-pointed the manifest; the retired increments still exist
	MergeIncrement = "merge-increment" // a merge stored the merged increment; no manifest names it yet
	Collected      = "collected"       // the owner removed the increments no manifest lists (after a compaction or a merge)
	AfterPersist   = "after-persist"   // the object is written; the checkpoint not yet recorded
	BeforeS3Flush  = "before-s3-flush" // shutdown: after the git flush, before the S3 flush
	BeforeWrite    = "before-write"    // a fenced write checked the ownership record; its PUT is not sent yet
	BeforePush     = "before-push"     // dual_shadow: the push checked the ownership record; git push not run yet

	WebhookAccepted = "webhook-accepted" // an async message is journaled; the 202 is not written yet
	WebhookTurn     = "webhook-turn"     // a journaled message's turn is about to run
	WebhookReplied  = "webhook-replied"  // the turn's reply is journaled; its changes are not committed yet
	CallbackRetry   = "callback-retry"   // a callback attempt failed; the retry's backoff begins

	SpareClaimed = "spare-claimed" // a warm pool's spare took its claim (answered); its cold start has not begun
	TurnWaiting  = "turn-waiting"  // a turn (a rollback, a flush) waits for the running one to end

	EnvPauseAt = "SVC_TEST_PAUSE_AT" // comma-separated points
	EnvHookDir = "SVC_TEST_HOOK_DIR"
)

// Enabled reports whether any pause point is configured.
func Enabled() bool { return os.Getenv(EnvPauseAt) != "" }

// Reach pauses at point if the environment asks for it and the test has
// prepared the point: $SVC_TEST_HOOK_DIR/<point> must already be a FIFO.
// An environment variable alone never stops a process (a production pod
// with a stray SVC_TEST_PAUSE_AT runs on).
func Reach(point string) {
	if !listed(os.Getenv(EnvPauseAt), point) {
		return
	}
	dir := os.Getenv(EnvHookDir)
	hook := filepath.Join(dir, point)
	if dir == "" || !isFIFO(hook) {
		return
	}
	if f, err := os.OpenFile(hook, os.O_WRONLY, 0); err == nil {
		_, _ = f.WriteString(point)
		_ = f.Close()
	}
	if goPath := hook + ".go"; isFIFO(goPath) {
		_, _ = os.ReadFile(goPath)
		return
	}
	select {} // the test kills the process here
}

func listed(at, point string) bool {
	for _, p := range strings.Split(at, ",") {
		if p == point {
			return true
		}
	}
	return false
}

func isFIFO(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
