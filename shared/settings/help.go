package settings

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Help lists every setting of opts, one a line: its flag, its environment
// variable (a secret's <VAR>_FILE too), its default and what it is. It is
// what -h prints for a command whose flags are opts (Parse), and the
// settings part of its cobra help.
func Help[C any](opts []Option[C]) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  FLAG\tVARIABLE\tDEFAULT\tMEANING")
	for _, o := range opts {
		env := o.Env
		if o.Secret {
			env += " or " + o.Env + "_FILE"
		}
		def := o.Def
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(w, "  --%s\t%s\t%s\t%s\n", o.Flag, env, def, o.Usage)
	}
	_ = w.Flush()
	return b.String()
}
