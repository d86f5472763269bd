package client

import (
	"regexp"
	"strings"
	"testing"
)

// TestSuffixedNames: the temporary names of the helpers are valid sandbox
// names, whatever the length of the original's.
func TestSuffixedNames(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	for _, base := range []string{"a", "dev", strings.Repeat("x", 52), strings.Repeat("y", 63)} {
		for _, tag := range []string{"try", "old", "back"} {
			n := suffixed(base, tag)
			if !valid.MatchString(n) || !strings.Contains(n, "-"+tag+"-") {
				t.Errorf("suffixed(%d bytes, %s) = %q (%d bytes)", len(base), tag, n, len(n))
			}
			if m := suffixed(base, tag); m == n {
				t.Errorf("two names alike: %s", n)
			}
		}
	}
}
