// Package secret holds the mechanisms of secrets that never enter a
// sandbox: checking what a request gives (names, values, rules and their
// limits), sealing values at rest (AES-256-GCM under a key file in sbxd's
// data dir), the placeholders a sandbox sees instead of values, matching a
// request against a secret's rules, and the per-sandbox certificate
// authority with which the egress proxy terminates TLS for the hosts of
// those rules. The engine decides when; internal/network's proxy puts the
// values into requests.
package secret

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strings"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// Limits of what a request may give.
const (
	// MaxSecrets bounds a sandbox's secrets.
	MaxSecrets = 100
	// MaxValueBytes bounds a secret's value: 64 KiB.
	MaxValueBytes = 64 << 10
	// MaxRules bounds a secret's rules.
	MaxRules = 100
	// MaxNameLen bounds a secret's name, in bytes.
	MaxNameLen = 128
	// MaxPathPrefix bounds a rule's path_prefix, in bytes.
	MaxPathPrefix = 1024
)

// PlaceholderPrefix starts every placeholder; 32 hex digits (128 random
// bits) follow.
const PlaceholderPrefix = "sbx-secret-"

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Methods are the HTTP methods a rule may name (RFC 9110 section 9 and
// PATCH, RFC 5789; CONNECT and TRACE are never proxied with a secret).
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Rule is a parsed api.SecretRule: Host lowercase without a trailing dot
// ("*.example.org" for a wildcard), Methods upper case, PathPrefix clean
// and starting with "/".
type Rule struct {
	Host       string
	Methods    []string
	PathPrefix string
}

// NewPlaceholder returns a fresh placeholder: PlaceholderPrefix and 32 hex
// digits from crypto/rand.
func NewPlaceholder() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("secret: crypto/rand: " + err.Error())
	}
	return PlaceholderPrefix + hex.EncodeToString(b[:])
}

// ValidateName checks a secret's name; field names it in the error.
//
// Errors: ErrInvalidArgument "field: ...".
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return errdefs.Invalid(field, "empty: give the env var that will hold the placeholder, e.g. API_TOKEN")
	case len(name) > MaxNameLen:
		return errdefs.Invalid(field, "longer than %d characters", MaxNameLen)
	case !nameRE.MatchString(name):
		return errdefs.Invalid(field, "%q is not an env var name: letters, digits and '_', not a digit first", name)
	}
	return nil
}

// ValidateValue checks a secret's value; field names it in the error,
// which never quotes the value.
//
// Errors: ErrInvalidArgument "field: ...".
func ValidateValue(field, value string) error {
	switch {
	case value == "":
		return errdefs.Invalid(field, "empty")
	case len(value) > MaxValueBytes:
		return errdefs.Invalid(field, "%d bytes, at most %d (64 KiB)", len(value), MaxValueBytes)
	case strings.ContainsAny(value, "\x00\r\n"):
		return errdefs.Invalid(field, "has a NUL, CR or LF byte: a value goes into HTTP headers")
	case strings.Contains(value, PlaceholderPrefix):
		return errdefs.Invalid(field, "contains %q, which starts placeholders", PlaceholderPrefix)
	}
	return nil
}

// ParseRules checks a secret's rules and returns them parsed; field is the
// rules' field ("secrets[0].rules").
//
// Errors: ErrInvalidArgument naming the entry ("secrets[0].rules[1].host: ...").
func ParseRules(field string, in []api.SecretRule) ([]Rule, error) {
	if len(in) == 0 {
		return nil, errdefs.Invalid(field, "at least one rule is needed: a secret without rules could go nowhere")
	}
	if len(in) > MaxRules {
		return nil, errdefs.Invalid(field, "%d rules, at most %d", len(in), MaxRules)
	}
	out := make([]Rule, 0, len(in))
	for i, r := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		host, err := parseHost(r.Host)
		if err != nil {
			return nil, errdefs.Invalid(f+".host", "%q: %v", r.Host, err)
		}
		if len(r.Methods) == 0 {
			return nil, errdefs.Invalid(f+".methods", "at least one method is needed, e.g. [\"GET\"]")
		}
		var methods []string
		for j, m := range r.Methods {
			if !contains(Methods, m) {
				return nil, errdefs.Invalid(fmt.Sprintf("%s.methods[%d]", f, j), "%q is not one of %s", m, strings.Join(Methods, ", "))
			}
			if !contains(methods, m) {
				methods = append(methods, m)
			}
		}
		prefix := r.PathPrefix
		if prefix == "" {
			prefix = "/"
		}
		if err := checkPathPrefix(prefix); err != nil {
			return nil, errdefs.Invalid(f+".path_prefix", "%q: %v", r.PathPrefix, err)
		}
		out = append(out, Rule{Host: host, Methods: methods, PathPrefix: prefix})
	}
	return out, nil
}

// API returns rules in the API's form, canonical (what sbxd stores and
// answers).
func API(rules []Rule) []api.SecretRule {
	out := make([]api.SecretRule, len(rules))
	for i, r := range rules {
		out[i] = api.SecretRule{Host: r.Host, Methods: append([]string{}, r.Methods...), PathPrefix: r.PathPrefix}
	}
	return out
}

// Validate checks secrets given in a request (field "secrets"): the
// count, each name (no two alike), value and rules. It returns the rules
// parsed, index for index.
//
// Errors: ErrInvalidArgument naming the entry ("secrets[2].value: ...").
func Validate(field string, in []api.Secret) ([][]Rule, error) {
	if len(in) > MaxSecrets {
		return nil, errdefs.Invalid(field, "%d secrets, at most %d", len(in), MaxSecrets)
	}
	seen := map[string]bool{}
	out := make([][]Rule, len(in))
	for i, s := range in {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := ValidateName(f+".name", s.Name); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, errdefs.Invalid(f+".name", "%q is given twice", s.Name)
		}
		seen[s.Name] = true
		if err := ValidateValue(f+".value", s.Value); err != nil {
			return nil, err
		}
		rules, err := ParseRules(f+".rules", s.Rules)
		if err != nil {
			return nil, err
		}
		out[i] = rules
	}
	return out, nil
}

// parseHost checks a rule's host: a DNS name of two labels or more
// (letters, digits, '-', '_'), or "*." and one; never a URL, an address, a
// port or a path.
func parseHost(s string) (string, error) {
	switch {
	case s == "":
		return "", fmt.Errorf("empty")
	case strings.Contains(s, "://"):
		return "", fmt.Errorf("is a URL: give the host name only")
	case strings.ContainsAny(s, "/?#@\\"):
		return "", fmt.Errorf("has a path or user part: give the host name only")
	case strings.Contains(s, ":"):
		if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
			return "", fmt.Errorf("is an IP address: give a host name (TLS names the host it reaches)")
		}
		return "", fmt.Errorf("has a port: a rule applies to HTTPS on port 443 and HTTP on 80; give the host name only")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", fmt.Errorf("is an IP address: give a host name (TLS names the host it reaches)")
	}
	return ParseHostName(s)
}

// ParseHostName checks a host name pattern, once a caller has refused
// URLs, ports and addresses in its own words: dot-separated labels of
// letters, digits, '-' and '_' (RFC 1123, '_' as DNS allows), 1-63 bytes
// each and 253 in all, two labels or more, the last not all digits,
// optionally "*." first (a wildcard: every name under the rest, which has
// two labels or more). It returns the name lowercase without a trailing
// dot ("*.example.org"). Network rules' domains and secrets' hosts both use
// it; MatchHost matches names against what it returns.
//
// Errors name the fault and never quote more than a label.
func ParseHostName(s string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(s), ".")
	if d == "" {
		return "", fmt.Errorf("empty")
	}
	if len(d) > 253 {
		return "", fmt.Errorf("longer than 253 characters")
	}
	labels := strings.Split(d, ".")
	if labels[0] == "*" {
		labels = labels[1:]
		if len(labels) < 2 {
			return "", fmt.Errorf("a wildcard needs a domain of two labels or more, e.g. *.example.org")
		}
	}
	if len(labels) < 2 {
		return "", fmt.Errorf("not a host name of two labels or more, e.g. api.example.org (no dot)")
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "", fmt.Errorf("looks like an IPv4 address but is not one (four numbers 0-255, e.g. 10.0.0.1); a host name's last label is not all digits")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("has an empty or over-long label")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return "", fmt.Errorf("'*' is allowed only as the whole first label (*.example.org)")
				}
				return "", fmt.Errorf("label %q has %q", l, c)
			}
		}
	}
	return d, nil
}

// checkPathPrefix: absolute, clean (no "." or ".." segment, no "//"), no
// query, fragment or percent-escape.
func checkPathPrefix(p string) error {
	switch {
	case len(p) > MaxPathPrefix:
		return fmt.Errorf("longer than %d bytes", MaxPathPrefix)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("must start with /")
	case strings.ContainsAny(p, "?#%\\ \t\r\n\x00"):
		return fmt.Errorf("must be a plain path: no query, fragment, escape, backslash or space")
	case !cleanPath(p):
		return fmt.Errorf("must be clean: no '.', '..' or empty segment")
	}
	return nil
}

// cleanPath reports whether p, an absolute path, has no ".", ".." or
// empty segment (a trailing "/" is fine).
func cleanPath(p string) bool {
	q := strings.TrimSuffix(p, "/")
	if q == "" {
		return true
	}
	return path.Clean(q) == q
}

// MatchHost reports whether host (a request's, lowercase) is the rule's,
// or under its wildcard ("*.example.org" matches a.example.org, not
// example.org).
func (r Rule) MatchHost(host string) bool { return MatchHost(r.Host, host) }

// MatchHost reports whether name (any case, a trailing dot allowed)
// matches pattern (from ParseHostName): "example.org" only itself,
// "*.example.org" every name under it, not example.org itself.
func MatchHost(pattern, name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == pattern
}

// Match reports whether a request to host with method and path (decoded,
// without the query) may carry the secret. A path that is not clean (a
// "." or ".." segment, "//") never matches: the server could read it as
// another path than the prefix.
func (r Rule) Match(host, method, p string) bool {
	if !r.MatchHost(host) || !contains(r.Methods, method) {
		return false
	}
	if !strings.HasPrefix(p, "/") || !cleanPath(p) {
		return false
	}
	if r.PathPrefix == "/" || p == r.PathPrefix {
		return true
	}
	pre := strings.TrimSuffix(r.PathPrefix, "/")
	return strings.HasPrefix(p, pre+"/")
}

// MatchAny reports whether one of rules matches.
func MatchAny(rules []Rule, host, method, p string) bool {
	for _, r := range rules {
		if r.Match(host, method, p) {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
