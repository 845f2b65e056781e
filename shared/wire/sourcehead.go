package wire

import "strings"

// project-src.tar.gz records the commit it was taken from in the gzip
// header comment of its first member (docs/sync-modes.md §5), so the API's
// status read and the parity check learn its head from the first bytes of
// the object.

const sourceHeadPrefix = "svc-head="

// SourceHeadComment is the gzip comment of a project-src.tar.gz taken at
// commit sha ("" when the workspace has no commit).
func SourceHeadComment(sha string) string {
	if sha == "" {
		return ""
	}
	return sourceHeadPrefix + sha
}

// SourceHead returns the sha recorded by SourceHeadComment, or "" when the
// comment holds none (an archive written before the comment existed).
func SourceHead(comment string) string {
	sha, ok := strings.CutPrefix(comment, sourceHeadPrefix)
	if !ok || len(sha) < 40 || len(sha) > 64 || strings.Trim(sha, "0123456789abcdef") != "" {
		return ""
	}
	return sha
}
