// Package testhook lets an end-to-end test stop a real podagent process at
// an exact point (for kill -9 and shutdown tests) without sleeps.
//
// When SVC_TEST_PAUSE_AT names the point, Reach opens $SVC_TEST_HOOK_DIR/<point>
// for writing, writes the point's name and closes it. A test that created
// that path as a FIFO is blocked reading it until this moment, so it learns
// exactly when the pod got there. Then, if $SVC_TEST_HOOK_DIR/<point>.go is
// a FIFO, Reach waits until the test writes to it and continues; otherwise it
// blocks forever (the test kills the process). With the variables unset
// (production) Reach does nothing.
package testhook

import (
	"os"
	"path/filepath"
	"strings"
)

// Points used by the pod, and the environment variables.
const (
	AfterCommit   = "after-commit"    // the turn's commit exists locally; nothing persisted yet
	MidUpload     = "mid-upload"      // half of repo.git.tar.gz has been sent to the store
	AfterPersist  = "after-persist"   // the object is written; the checkpoint not yet recorded
	BeforeS3Flush = "before-s3-flush" // shutdown: after the git flush, before the S3 flush

	WebhookAccepted = "webhook-accepted" // an async message is journaled; the 202 is not written yet
	WebhookTurn     = "webhook-turn"     // a journaled message's turn is about to run
	WebhookReplied  = "webhook-replied"  // the turn's reply is journaled; its changes are not committed yet
	CallbackRetry   = "callback-retry"   // a callback attempt failed; the retry's backoff begins

	EnvPauseAt = "SVC_TEST_PAUSE_AT" // comma-separated points
	EnvHookDir = "SVC_TEST_HOOK_DIR"
)

// Enabled reports whether any pause point is configured.
func Enabled() bool { return os.Getenv(EnvPauseAt) != "" }

// Reach pauses at point if the environment asks for it.
func Reach(point string) {
	at := os.Getenv(EnvPauseAt)
	if at == "" {
		return
	}
	for _, p := range strings.Split(at, ",") {
		if p != point {
			continue
		}
		dir := os.Getenv(EnvHookDir)
		if dir == "" {
			select {}
		}
		if f, err := os.OpenFile(filepath.Join(dir, point), os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			_, _ = f.WriteString(point)
			_ = f.Close()
		}
		goPath := filepath.Join(dir, point+".go")
		if fi, err := os.Stat(goPath); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
			_, _ = os.ReadFile(goPath)
			return
		}
		select {}
	}
}
