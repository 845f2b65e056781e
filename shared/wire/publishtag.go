package wire

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PublishTagPrefix starts every publish tag (spec 6, 10.4).
const PublishTagPrefix = "publish/"

var subdomainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateSubdomain accepts one lowercase DNS label (1-63 characters of
// a-z, 0-9 and "-", not starting or ending with "-").
func ValidateSubdomain(s string) error {
	if !subdomainRE.MatchString(s) {
		return fmt.Errorf("invalid subdomain %q: want one lowercase DNS label (a-z, 0-9, '-')", s)
	}
	return nil
}

// PublishTag returns publish/<subdomain>/<unix-ts>.
func PublishTag(subdomain string, now time.Time) (string, error) {
	if err := ValidateSubdomain(subdomain); err != nil {
		return "", err
	}
	return PublishTagPrefix + subdomain + "/" + strconv.FormatInt(now.Unix(), 10), nil
}

// ParsePublishTag checks that tag has the shape publish/<subdomain>/<unix-ts>
// and returns its parts.
func ParsePublishTag(tag string) (subdomain string, ts time.Time, err error) {
	rest, ok := strings.CutPrefix(tag, PublishTagPrefix)
	sub, tsStr, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return "", time.Time{}, fmt.Errorf("invalid publish tag %q: want publish/<subdomain>/<unix-ts>", tag)
	}
	if err := ValidateSubdomain(sub); err != nil {
		return "", time.Time{}, fmt.Errorf("invalid publish tag %q: %w", tag, err)
	}
	if tsStr == "" || len(tsStr) > 12 || strings.TrimLeft(tsStr, "0123456789") != "" || (len(tsStr) > 1 && tsStr[0] == '0') {
		return "", time.Time{}, fmt.Errorf("invalid publish tag %q: the timestamp must be unix seconds", tag)
	}
	n, _ := strconv.ParseInt(tsStr, 10, 64)
	return sub, time.Unix(n, 0).UTC(), nil
}
