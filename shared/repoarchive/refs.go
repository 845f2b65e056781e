package repoarchive

// Tips returns the distinct object ids refs point at, in the order of
// their ref names: the tips (or the exclusions) PackObjects takes for a
// set of refs (docs/sync-modes.md §13.1).
func Tips(refs map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range SortedRefNames(refs) {
		if id := refs[name]; !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// SameRefs reports whether a and b name the same refs at the same ids
// (a nil map and an empty one are the same).
func SameRefs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
