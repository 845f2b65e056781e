package main

import "testing"

func TestRunExportsEnvAndForwardsExitCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"exit code", []string{"--", "sh", "-c", "exit 3"}, 3},
		{"env exported", []string{"--", "sh", "-c",
			`test -n "$SVC_TEST_DATABASE_URL" && test -n "$SVC_TEST_S3_ENDPOINT" && test -n "$SVC_TEST_S3_SECRET_KEY"`}, 0},
		{"killed by signal", []string{"--", "sh", "-c", "kill -TERM $$"}, 143},
		{"missing command", []string{"--", "/nonexistent/svc-testenv-child"}, 127},
		{"no command", []string{"--"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(tc.args); got != tc.want {
				t.Fatalf("run(%q) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
