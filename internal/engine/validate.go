package engine

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/sbxhq/sbx/internal/errdefs"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateName checks a sandbox name against API.md's [a-z0-9][a-z0-9-]{0,62}.
func ValidateName(field, n string) error {
	if !nameRE.MatchString(n) {
		return errdefs.Invalid(field, "%q must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit", n)
	}
	return nil
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func validateEnv(field string, env map[string]string) error {
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			return errdefs.Invalid(field, "%q is not a valid variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return errdefs.Invalid(field, "value of %s contains a NUL byte", k)
		}
	}
	return nil
}

var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)

func validateLabels(labels map[string]string) error {
	if len(labels) > 64 {
		return errdefs.Invalid("labels", "%d labels, at most 64", len(labels))
	}
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return errdefs.Invalid("labels", "key %q must be 1 to 63 characters of A-Z a-z 0-9 . _ / -", k)
		}
		if len(v) > 256 || strings.ContainsAny(v, "\x00\n") {
			return errdefs.Invalid("labels", "value of %q must be at most 256 bytes on one line", k)
		}
	}
	return nil
}

// reservedPaths are where sbx mounts its own things; volumes may not go
// there and the files API may not touch them.
var reservedPaths = []string{"/.sbx", "/proc", "/sys", "/dev"}

func underReserved(p string) bool {
	for _, r := range reservedPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// CleanPath checks a path given to the files API or as a cwd: absolute,
// at most 4096 bytes, no "." or ".." elements, no NUL. It returns it cleaned
// of a trailing slash.
func CleanPath(field, p string) (string, error) {
	if p == "" {
		return "", errdefs.Invalid(field, "path is required")
	}
	if len(p) > 4096 {
		return "", errdefs.Invalid(field, "path is %d bytes, at most 4096", len(p))
	}
	if !strings.HasPrefix(p, "/") {
		return "", errdefs.Invalid(field, "%q is not an absolute path", p)
	}
	if strings.ContainsRune(p, 0) {
		return "", errdefs.Invalid(field, "path contains a NUL byte")
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return "", errdefs.Invalid(field, "%q has a %q element; give the path without it", p, el)
		}
	}
	return path.Clean(p), nil
}

const nameAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// generateName returns "sb-" and 8 random lowercase letters and digits.
func generateName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	out := []byte("sb-")
	for _, c := range b {
		out = append(out, nameAlphabet[int(c)%len(nameAlphabet)])
	}
	return string(out)
}

// checkStatic fails unless b is an ELF executable without an interpreter
// (a static binary runs in any image, with or without a C library).
func checkStatic(b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("sbx-agent is dynamically linked; build it with CGO_ENABLED=0")
		}
	}
	return nil
}
