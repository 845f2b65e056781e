package settings

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
)

// Prefix is what every setting's environment variable starts with.
const Prefix = "SVC_"

// ReservedPrefixes are SVC_ prefixes that are no binary's settings and are
// never refused (docs/design.md §5, "Environment"):
//
//   - SVC_TEST_ and SVC_BENCH_: the test harness, test hooks and benchmarks;
//   - SVC_POD_: the API server passes SVC_POD_<NAME> to runtime pods as
//     SVC_<NAME> (local and kubernetes drivers);
//   - SVC_GUEST_: the metal host passes SVC_GUEST_<NAME> to its guests'
//     pods as SVC_<NAME>.
var ReservedPrefixes = []string{"SVC_TEST_", "SVC_BENCH_", "SVC_POD_", "SVC_GUEST_"}

// EnvNames are the environment variables of opts: each Env that starts
// with Prefix and, for a secret, its <VAR>_FILE.
func EnvNames[C any](opts []Option[C]) []string {
	var names []string
	for _, o := range opts {
		if !strings.HasPrefix(o.Env, Prefix) {
			continue
		}
		names = append(names, o.Env)
		if o.Secret {
			names = append(names, o.Env+"_FILE")
		}
	}
	return names
}

// Foreign is an SVC_ variable of another program of the service (Programs),
// which the checking program accepts and ignores.
type Foreign struct{ Name, Program string }

// CheckEnviron checks the SVC_ variables of environ (os.Environ's KEY=value
// form) against known, the checking program's own names. A variable under a
// ReservedPrefixes prefix passes. A variable of another program (Programs)
// passes too and is returned, for the caller to log at debug: one
// environment may serve several programs (a Compose env file, one
// ConfigMap). Every other SVC_ variable refuses the start, naming the nearest
// name any program knows (as Gitea refuses unknown settings): a typo must not
// fall back to the default silently.
func CheckEnviron(environ, known []string) ([]Foreign, error) {
	var bad []string
	var foreign []Foreign
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, Prefix) || slices.Contains(known, k) || reserved(k) {
			continue
		}
		if p := programOf(k); p != "" {
			foreign = append(foreign, Foreign{Name: k, Program: p})
			continue
		}
		msg := k
		if n := Nearest(k, append(slices.Clone(known), allNames()...)); n != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", n)
		}
		bad = append(bad, msg)
	}
	if len(bad) == 0 {
		sort.Slice(foreign, func(i, j int) bool { return foreign[i].Name < foreign[j].Name })
		return foreign, nil
	}
	sort.Strings(bad)
	return nil, fmt.Errorf("config: unknown environment variable %s; unset it or fix its name (the settings are listed by -h)",
		strings.Join(bad, ", "))
}

func reserved(k string) bool {
	for _, p := range ReservedPrefixes {
		if strings.HasPrefix(k, p) && len(k) > len(p) {
			return true
		}
	}
	return false
}

// Nearest is the name of known at the smallest edit distance from name,
// the first such in known on a tie; "" when none is within a third of
// name's length (then no name is a plausible intent).
func Nearest(name string, known []string) string {
	best, bestD := "", len(name)/3+1
	for _, k := range known {
		if d := levenshtein.ComputeDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}
