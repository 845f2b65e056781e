package checkpointreads

import (
	"regexp"
	"strings"

	"github.com/svc-dev/svc/shared/wire"
)

var (
	// shaRE is an abbreviated or full commit id (sha1; 64 for sha256).
	shaRE = regexp.MustCompile(`^(?:[0-9a-f]{4,40}|[0-9a-f]{64})$`)
	// refRE is a strict subset of git's ref-name rules: it cannot start
	// with "-" (an option) and holds no revision syntax (~ ^ : @{ ..).
	refRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}$`)
)

// validSHA reports whether s is a commit id a user may pass.
func validSHA(s string) bool { return shaRE.MatchString(s) }

// validRev reports whether s is a commit id or a plain ref name (HEAD,
// main, refs/heads/main, publish/site/1700000000): nothing that git could
// read as an option, a range or revision arithmetic.
func validRev(s string) bool {
	if validSHA(s) {
		return true
	}
	if !refRE.MatchString(s) || strings.Contains(s, "..") || strings.Contains(s, "//") ||
		strings.Contains(s, "/.") || strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".") ||
		strings.HasSuffix(s, ".lock") {
		return false
	}
	return true
}

func invalidSHA(param, v string) *wire.Error {
	return wire.Coded("invalid_sha",
		"The "+param+" parameter must be a commit id of 4 to 40 lowercase hex digits.")
}

func invalidRev(param string) *wire.Error {
	return wire.Coded("invalid_ref",
		"The "+param+" parameter must be a commit id (4-40 hex digits) or a plain ref name (letters, digits, '.', '_', '/', '-', '+'; no leading '-', no '..').")
}
