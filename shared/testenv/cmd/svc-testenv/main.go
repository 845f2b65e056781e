// Command svc-testenv runs a command with a throw-away PostgreSQL and MinIO
// (design section 4: integration tests use real servers; `make test` runs
// every module's tests under it):
//
//	go run ./cmd/svc-testenv -- make test-modules
//
// It starts the servers with the same code the tests use (package testenv),
// exports SVC_TEST_DATABASE_URL (an admin URL) and SVC_TEST_S3_ENDPOINT,
// SVC_TEST_S3_ACCESS_KEY, SVC_TEST_S3_SECRET_KEY to the command, forwards
// SIGINT/SIGTERM to it, exits with its status and always stops the servers.
// A server given in the environment already (SVC_TEST_DATABASE_URL,
// SVC_TEST_S3_ENDPOINT) is used as is and not started.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/svc-dev/svc/shared/testenv"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: svc-testenv -- <command> [args...]")
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	startCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interrupted := make(chan bool, 1)
	go func() {
		// A signal during startup aborts it; later ones are forwarded below.
		select {
		case <-sigs:
			cancel()
			interrupted <- true
		case <-startCtx.Done():
			interrupted <- false
		}
	}()

	env, stop, err := start(startCtx)
	defer stop()
	cancel()
	if <-interrupted {
		fmt.Fprintln(os.Stderr, "svc-testenv: interrupted during startup")
		return 130
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "svc-testenv: %v\n", err)
		return 1
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "svc-testenv: %v\n", err)
		return 127
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			cmd.Process.Signal(sig)
		case err := <-waited:
			return exitCode(err)
		}
	}
}

// start brings up what the environment does not already provide and
// returns the variables for the child and a function that stops it all.
func start(ctx context.Context) (env []string, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if os.Getenv(testenv.EnvDatabaseURL) == "" {
		pg, err := testenv.StartPostgres(ctx)
		if err != nil {
			return nil, stop, err
		}
		stops = append(stops, pg.Stop)
		env = append(env, testenv.EnvDatabaseURL+"="+pg.URL())
		fmt.Fprintf(os.Stderr, "svc-testenv: PostgreSQL at %s\n", pg.URL())
	}
	if os.Getenv(testenv.EnvS3Endpoint) == "" {
		m, err := testenv.StartMinIO(ctx)
		if err != nil {
			return nil, stop, err
		}
		stops = append(stops, m.Close)
		env = append(env,
			testenv.EnvS3Endpoint+"="+m.Endpoint,
			testenv.EnvS3AccessKey+"="+m.AccessKey,
			testenv.EnvS3SecretKey+"="+m.SecretKey)
		fmt.Fprintf(os.Stderr, "svc-testenv: MinIO at %s\n", m.Endpoint)
	}
	return env, stop, nil
}

// exitCode is the child's exit status; 128+n when a signal n killed it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintf(os.Stderr, "svc-testenv: %v\n", err)
	return 1
}
