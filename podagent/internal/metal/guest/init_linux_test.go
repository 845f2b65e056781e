package guest

import "testing"

// Only PID 1 with the guest kernel's parameter is a guest init: PID 1 of a
// container (no parameter) runs the pod normally.
func TestIsInit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pid  int
		env  map[string]string
		want bool
	}{
		{"guest kernel's init", 1, map[string]string{InitEnv: "1"}, true},
		{"container PID 1", 1, nil, false},
		{"container PID 1 with another value", 1, map[string]string{InitEnv: "0"}, false},
		{"a process with the variable", 42, map[string]string{InitEnv: "1"}, false},
	} {
		if got := isInit(tc.pid, func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%s: isInit = %v, want %v", tc.name, got, tc.want)
		}
	}
	if KernelArg != InitEnv+"=1" {
		t.Fatalf("KernelArg %q does not set %s to 1", KernelArg, InitEnv)
	}
}
