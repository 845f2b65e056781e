package gitrun

import "strings"

// ConfigParameters is the GIT_CONFIG_PARAMETERS=… environment entry that
// hands git (and git-lfs) the settings kv for one command, without writing
// them to any config file: the way the pod passes its bearer token and
// transfer settings to a push or an LFS transfer.
func ConfigParameters(kv [][2]string) string {
	var b strings.Builder
	for i, p := range kv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(sqQuote(p[0]) + "=" + sqQuote(p[1]))
	}
	return "GIT_CONFIG_PARAMETERS=" + b.String()
}

// sqQuote quotes s the way git's sq_quote_buf does for GIT_CONFIG_PARAMETERS.
func sqQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, c := range s {
		switch c {
		case '\'', '!':
			b.WriteString(`'\` + string(c) + `'`)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
