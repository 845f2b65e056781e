package settings

import (
	"fmt"
	"slices"
	"strings"
)

// Programs are the programs of the service that read SVC_ variables, each
// with the variables it reads: a binary's option table (EnvNames), or, for
// the test harness, the variables make test and svc-testenv use to find
// their tools (shared/testenv.ToolVariables), which a binary started from a
// test inherits. A program accepts another program's variable with a debug
// line and refuses only a name no program knows (CheckEnviron). This is a
// list of names, not a table of settings: each program's own test compares
// its entry with its table (ProgramDrift), so the two cannot drift apart.
var Programs = map[string][]string{
	"apiserver":        apiserverNames,
	"podagent":         podagentNames,
	"podagent paired":  pairedNames,
	"metalhost":        metalhostNames,
	"the test harness": testHarnessNames,
}

// programOf is the first program (by name) that reads name, "" when none does.
func programOf(name string) string {
	ps := make([]string, 0, len(Programs))
	for p := range Programs {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		if slices.Contains(Programs[p], name) {
			return p
		}
	}
	return ""
}

// allNames are the variables of every program.
func allNames() []string {
	var all []string
	for _, names := range Programs {
		all = append(all, names...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// ProgramDrift compares the entry of program in Programs with names (its
// table's EnvNames); on a difference it says what to change and gives the
// entry to paste into programs_names.go.
func ProgramDrift(program string, names []string) error {
	want := slices.Sorted(slices.Values(names))
	want = slices.Compact(want)
	got := slices.Sorted(slices.Values(Programs[program]))
	if slices.Equal(got, want) {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "settings.Programs[%q] is not the program's table; its entry in shared/settings/programs_names.go should read:\n{", program)
	for i, n := range want {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	b.WriteString("}")
	return fmt.Errorf("%s", b.String())
}
