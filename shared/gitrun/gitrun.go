// Package gitrun is the one runner for the real git binary (docs/design.md §4, after
// Gitea's modules/git/gitcmd). Every git call of podagent and apiserver goes
// through it:
//
//   - trusted arguments (literals of type Arg, written in our code) are kept
//     apart from user values (AddDynamic), and a user value that starts with
//     "-" is refused, so it can never be read as an option;
//   - the environment is fixed: LC_ALL=C, GIT_TERMINAL_PROMPT=0,
//     GIT_CONFIG_NOSYSTEM=1, and either HOME pointed at a controlled
//     directory or GIT_CONFIG_GLOBAL=/dev/null, so no user or system config
//     leaks in;
//   - every command has a timeout (the runner's default or its own);
//   - a failure is a *Error carrying the arguments, the exit code and stderr.
//
// Output, Run, and the stdin/stdout streaming options cover reads, writes
// and smart-HTTP plumbing alike.
package gitrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/svc-dev/svc/shared/settings"
)

// Arg is a trusted argument: an option or sub-command written in our own
// code. Untyped string constants convert to it implicitly; a string variable
// needs an explicit conversion, which is the reviewer's cue that the value
// must be trusted. User values go through Cmd.AddDynamic.
type Arg string

// DefaultTimeout bounds a command when neither the runner nor the command
// sets one.
const DefaultTimeout = 2 * time.Minute

// maxStderr caps the stderr kept in an Error.
const maxStderr = 64 << 10

// ErrUnsafeArgument is returned (wrapped in *Error) when a user value starts
// with "-" or contains a NUL byte.
var ErrUnsafeArgument = errors.New("gitrun: unsafe argument")

// Runner holds what every command shares. The zero value is usable: it runs
// "git" from PATH with GIT_CONFIG_GLOBAL=/dev/null and DefaultTimeout.
type Runner struct {
	// Bin is the git executable; empty means "git" from PATH.
	Bin string
	// Home, when set, is used as HOME (a controlled directory whose
	// .gitconfig we may write). When empty, GIT_CONFIG_GLOBAL=/dev/null.
	Home string
	// Timeout is the default per-command limit; zero means DefaultTimeout.
	Timeout time.Duration
	// Env holds extra KEY=VALUE pairs added to every command (for example
	// GIT_CONFIG_COUNT/KEY/VALUE triples such as safe.directory).
	Env []string
}

// Command starts a command with trusted arguments, for example
// r.Command("commit", "--no-verify", "-m").AddDynamic(msg).
func (r *Runner) Command(args ...Arg) *Cmd {
	c := &Cmd{r: r}
	for _, a := range args {
		c.args = append(c.args, string(a))
	}
	return c
}

// Cmd is one git invocation being built. Builders return the Cmd so calls
// chain; a refused argument is reported when the command runs.
type Cmd struct {
	r       *Runner
	args    []string
	dir     string
	env     []string
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	err     error
}

// AddArgs appends more trusted arguments.
func (c *Cmd) AddArgs(args ...Arg) *Cmd {
	for _, a := range args {
		c.args = append(c.args, string(a))
	}
	return c
}

// AddDynamic appends user values (revisions, refs, messages, remote URLs).
// A value starting with "-" or containing NUL is refused.
func (c *Cmd) AddDynamic(vals ...string) *Cmd {
	for _, v := range vals {
		if strings.HasPrefix(v, "-") || strings.IndexByte(v, 0) >= 0 {
			if c.err == nil {
				c.err = fmt.Errorf("%w: %q", ErrUnsafeArgument, v)
			}
			continue
		}
		c.args = append(c.args, v)
	}
	return c
}

// AddOptionValue appends a trusted option and its user value as
// "--opt=value"; the value may start with "-" since it cannot be parsed as
// an option once joined. opt must start with "--".
func (c *Cmd) AddOptionValue(opt Arg, val string) *Cmd {
	if !strings.HasPrefix(string(opt), "--") || strings.IndexByte(val, 0) >= 0 {
		if c.err == nil {
			c.err = fmt.Errorf("%w: option %q", ErrUnsafeArgument, opt)
		}
		return c
	}
	c.args = append(c.args, string(opt)+"="+val)
	return c
}

// AddDashesAndList appends "--" and then paths, which git reads as paths
// even when they start with "-".
func (c *Cmd) AddDashesAndList(paths ...string) *Cmd {
	c.args = append(c.args, "--")
	for _, p := range paths {
		if strings.IndexByte(p, 0) >= 0 {
			if c.err == nil {
				c.err = fmt.Errorf("%w: path %q", ErrUnsafeArgument, p)
			}
			continue
		}
		c.args = append(c.args, p)
	}
	return c
}

// Dir sets the working directory.
func (c *Cmd) Dir(dir string) *Cmd { c.dir = dir; return c }

// Env adds KEY=VALUE pairs for this command only.
func (c *Cmd) Env(kv ...string) *Cmd { c.env = append(c.env, kv...); return c }

// Timeout overrides the runner's limit for this command.
func (c *Cmd) Timeout(d time.Duration) *Cmd { c.timeout = d; return c }

// Stdin streams r to the command's standard input.
func (c *Cmd) Stdin(r io.Reader) *Cmd { c.stdin = r; return c }

// Stdout streams the command's standard output to w (Run only).
func (c *Cmd) Stdout(w io.Writer) *Cmd { c.stdout = w; return c }

// Stderr additionally copies stderr to w (it is always kept in *Error).
func (c *Cmd) Stderr(w io.Writer) *Cmd { c.stderr = w; return c }

// Args returns the arguments after "git", for logs and tests.
func (c *Cmd) Args() []string { return append([]string(nil), c.args...) }

// Output runs the command and returns its standard output.
func (c *Cmd) Output(ctx context.Context) ([]byte, error) {
	var out bytes.Buffer
	c.stdout = &out
	err := c.Run(ctx)
	return out.Bytes(), err
}

// String runs the command and returns its standard output without the
// trailing newline.
func (c *Cmd) String(ctx context.Context) (string, error) {
	out, err := c.Output(ctx)
	return strings.TrimRight(string(out), "\n"), err
}

// Run runs the command, streaming stdin/stdout as configured.
func (c *Cmd) Run(ctx context.Context) error {
	if c.err != nil {
		return &Error{Args: c.Args(), Dir: c.dir, ExitCode: -1, Err: c.err}
	}
	timeout := c.timeout
	timeout = settings.PositiveOr(timeout, c.r.Timeout)
	timeout = settings.PositiveOr(timeout, DefaultTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	bin := c.r.Bin
	if bin == "" {
		bin = "git"
	}
	cmd := exec.CommandContext(ctx, bin, c.args...)
	cmd.Dir = c.dir
	cmd.Env = c.r.environ(c.env)
	cmd.Stdin = c.stdin
	if c.stdout != nil {
		cmd.Stdout = c.stdout
	}
	stderr := &capWriter{max: maxStderr}
	if c.stderr != nil {
		cmd.Stderr = io.MultiWriter(stderr, c.stderr)
	} else {
		cmd.Stderr = stderr
	}
	setProcessGroup(cmd)
	cmd.WaitDelay = 5 * time.Second

	start := time.Now()
	err := cmd.Run()
	if err == nil {
		return nil
	}
	gerr := &Error{Args: c.Args(), Dir: c.dir, ExitCode: -1, Stderr: strings.TrimSpace(stderr.String()), Err: err, Duration: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		gerr.ExitCode = ee.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		gerr.Err = ctxErr
		if errors.Is(ctxErr, context.DeadlineExceeded) {
			gerr.TimedOut = true
		}
	}
	return gerr
}

// environ builds the fixed environment: the process's PATH (and TMPDIR),
// nothing else from the parent, then the runner's and the command's extras.
func (r *Runner) environ(extra []string) []string {
	env := []string{
		"LC_ALL=C",
		"LANG=C",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"GIT_EDITOR=true",
		"GIT_PAGER=cat",
		"PAGER=cat",
	}
	for _, k := range []string{"PATH", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if r.Home != "" {
		env = append(env, "HOME="+r.Home, "XDG_CONFIG_HOME="+r.Home)
	} else {
		env = append(env, "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent")
	}
	env = append(env, r.Env...)
	return append(env, extra...)
}

// Error is a failed git command.
type Error struct {
	Args     []string // arguments after "git"
	Dir      string
	ExitCode int // -1 when the process did not exit normally
	Stderr   string
	TimedOut bool
	Duration time.Duration
	Err      error
}

func (e *Error) Error() string {
	sub := ""
	if len(e.Args) > 0 {
		sub = e.Args[0]
	}
	msg := fmt.Sprintf("git %s: %v", sub, e.Err)
	if e.TimedOut {
		msg = fmt.Sprintf("git %s: timed out after %s", sub, e.Duration.Round(time.Millisecond))
	} else if e.ExitCode >= 0 {
		msg = fmt.Sprintf("git %s: exit status %d", sub, e.ExitCode)
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode returns the exit code of err if it is a *Error from a git that
// ran and exited, and -1 otherwise.
func ExitCode(err error) int {
	var ge *Error
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}

// capWriter keeps the first max bytes written to it.
type capWriter struct {
	buf bytes.Buffer
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		if len(p) > room {
			w.buf.Write(p[:room])
		} else {
			w.buf.Write(p)
		}
	}
	return len(p), nil
}

func (w *capWriter) String() string { return w.buf.String() }
