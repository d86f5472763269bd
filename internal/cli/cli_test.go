package cli

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs sbx with args against a socket where no sbxd listens (the
// cases here must fail before they reach sbxd) and returns stdout, stderr
// and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb strings.Builder
	args = append([]string{"--socket", filepath.Join(t.TempDir(), "none.sock")}, args...)
	code := Run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

// TestGroupWithoutSubcommand: `sbx net NAME` (and `sbx image`) is a
// usage error, exit 2, that names the subcommands, not the help with exit 0.
func TestGroupWithoutSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		subs []string
	}{
		{[]string{"net", "dev"}, []string{"get", "set", "log"}},
		{[]string{"image"}, []string{"build", "ls", "rm"}},
	} {
		_, errs, code := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errs, "needs a subcommand") {
			t.Errorf("sbx %v: exit %d, stderr %q; want exit 2 and a usage error", tc.args, code, errs)
		}
		for _, s := range tc.subs {
			if !strings.Contains(errs, s) {
				t.Errorf("sbx %v: stderr %q does not name %s", tc.args, errs, s)
			}
		}
	}
	if out, _, code := runCLI(t, "net", "--help"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("sbx net --help: exit %d %q", code, out)
	}
}

// TestMemoryFlagForms: --memory takes MiB or a size with a unit; anything
// else is an error that names the accepted forms, not strconv's text.
func TestMemoryFlagForms(t *testing.T) {
	for in, want := range map[string]int{"1024": 1024, "512M": 512, "512MiB": 512, "2G": 2048, "2gib": 2048, "1GB": 1024} {
		var v mibValue
		if err := v.Set(in); err != nil || int(v) != want {
			t.Errorf("--memory %s: %d, %v; want %d MiB", in, v, err, want)
		}
	}
	for _, bad := range []string{"1e9", "1.5G", "-1", "12K", "G", "9999999T"} {
		var v mibValue
		if err := v.Set(bad); err == nil {
			t.Errorf("--memory %s accepted as %d MiB", bad, v)
		}
	}
	// A well-formed size that is too large says so, not "give MiB as ...".
	for _, big := range []string{"99999999G", "9999999T", "-5"} {
		var v mibValue
		if err := v.Set(big); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("--disk %s: %v; want an out-of-range error", big, err)
		}
	}
	_, errs, code := runCLI(t, "create", "--memory", "1e9")
	if code == 0 || strings.Contains(errs, "ParseInt") || !strings.Contains(errs, "512M") || !strings.Contains(errs, "2G") {
		t.Errorf("create --memory 1e9: exit %d, stderr %q; want an error naming the accepted forms", code, errs)
	}
}

// TestForkCountCheckedFirst: a --count out of range is refused before any
// request or progress line.
func TestForkCountCheckedFirst(t *testing.T) {
	_, errs, code := runCLI(t, "fork", "dev", "--count", "99")
	if code == 0 || !strings.Contains(errs, "--count 99: want 1 to 16") || strings.Contains(errs, "fork of") || strings.Contains(errs, "sbxd") {
		t.Errorf("fork --count 99: exit %d, stderr %q; want only the --count error", code, errs)
	}
}

// TestUploadModeKeepsSpecialBits: sbx cp of a single file into a sandbox
// sends its setuid, setgid and sticky bits as the API's mode (04755), not
// Go's FileMode.Perm() that drops them.
func TestUploadModeKeepsSpecialBits(t *testing.T) {
	for m, want := range map[fs.FileMode]uint32{
		0o644: 0o644, fs.ModeSetuid | 0o755: 0o4755, fs.ModeSetgid | 0o711: 0o2711,
		fs.ModeSticky | 0o777: 0o1777, fs.ModeSetuid | fs.ModeSetgid | 0o750: 0o6750,
	} {
		if got := unixMode(m); got != want {
			t.Errorf("%v: mode %04o, want %04o", m, got, want)
		}
	}
}

// TestKeyCommands: `sbx key` needs a subcommand; a bad --daily-limit is a
// usage error before anything reaches sbxd.
func TestKeyCommands(t *testing.T) {
	_, errs, code := runCLI(t, "key")
	if code != 2 || !strings.Contains(errs, "create") || !strings.Contains(errs, "rm") {
		t.Errorf("sbx key: exit %d %q", code, errs)
	}
	for _, bad := range []string{"-1", "x", "NaN", "Inf"} {
		_, errs, code := runCLI(t, "key", "create", "k", "--daily-limit", bad)
		if code == 0 || !strings.Contains(errs, "daily-limit") || strings.Contains(errs, "connect") {
			t.Errorf("--daily-limit %s: exit %d %q; want a usage error naming the flag", bad, code, errs)
		}
	}
}

// TestSecretSetCheckedFirst: sbx secret set refuses, before any request, a
// secret without --host, an empty value, and --keep-value with a source;
// the value never comes from the command line.
func TestSecretSetCheckedFirst(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"secret", "set", "dev", "T"}, "--host"},
		{[]string{"secret", "set", "dev", "T", "--host", "api.test"}, "value is empty"},
		{[]string{"secret", "set", "dev", "T", "--host", "api.test", "--keep-value", "--from-env", "HOME"}, "contradict"},
		{[]string{"secret", "set", "dev", "T", "--host", "api.test", "--from-env", "SBX_TEST_SURELY_UNSET"}, "no such variable"},
	} {
		_, errs, code := runCLI(t, c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || strings.Contains(errs, "sbxd") {
			t.Errorf("sbx %v: exit %d, stderr %q; want an error about %s, before any request", c.args, code, errs, c.want)
		}
	}
}
