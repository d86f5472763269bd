package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeMachine returns probe hooks for a machine whose /dev/kvm answers
// devErr, whose CPU has virt or not, and whose runsc boot test answers
// bootErr; boots counts the boot tests run.
func fakeMachine(devErr error, virt bool, bootErr error, boots *int) probeHooks {
	return probeHooks{
		checkDevice: func() error { return devErr },
		cpuVirt:     func() bool { return virt },
		bootTest: func(ctx context.Context, platform string) error {
			*boots++
			if platform != "kvm" {
				return errors.New("boot test of " + platform)
			}
			return bootErr
		},
	}
}

func TestChoosePlatform(t *testing.T) {
	hang := errors.New("no answer in 8s")
	cases := []struct {
		name      string
		want      string
		devErr    error
		virt      bool
		bootErr   error
		platform  string
		reason    string // substring
		wantErr   bool
		wantBoots int
	}{
		{name: "no device", devErr: errors.New("no /dev/kvm"), platform: "systrap", reason: "no /dev/kvm"},
		{name: "device without vmx/svm (broken nested VM)", virt: false, platform: "systrap", reason: "no vmx/svm"},
		{name: "boot test hangs", virt: true, bootErr: hang, platform: "systrap", reason: "did not boot", wantBoots: 1},
		{name: "kvm works", virt: true, platform: "kvm", reason: "KVM works", wantBoots: 1},
		{name: "explicit kvm works", want: "kvm", virt: true, platform: "kvm", reason: "operator", wantBoots: 1},
		{name: "explicit kvm broken is an error", want: "kvm", virt: false, wantErr: true},
		{name: "explicit kvm, boot hangs, is an error", want: "kvm", virt: true, bootErr: hang, wantErr: true, wantBoots: 1},
		{name: "explicit systrap skips the probe", want: "systrap", devErr: errors.New("x"), platform: "systrap", reason: "operator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			boots := 0
			got, err := choosePlatform(context.Background(), c.want, t.TempDir(), "runsc v1", fakeMachine(c.devErr, c.virt, c.bootErr, &boots))
			if c.wantErr {
				if !errors.Is(err, ErrKVMUnusable) {
					t.Fatalf("err = %v, want ErrKVMUnusable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Platform != c.platform || !strings.Contains(got.Reason, c.reason) {
				t.Fatalf("got %+v, want platform %s with reason containing %q", got, c.platform, c.reason)
			}
			if boots != c.wantBoots {
				t.Fatalf("boot tests run: %d, want %d", boots, c.wantBoots)
			}
		})
	}
}

func TestChoosePlatformRemembered(t *testing.T) {
	dir := t.TempDir()
	boots := 0
	h := fakeMachine(nil, true, nil, &boots)
	for i := 0; i < 3; i++ {
		got, err := choosePlatform(context.Background(), "", dir, "runsc v1", h)
		if err != nil || got.Platform != "kvm" {
			t.Fatalf("got %+v, %v", got, err)
		}
	}
	if boots != 1 {
		t.Fatalf("boot tests: %d, want 1 (the answer is remembered)", boots)
	}
	// Another runsc version probes again.
	if _, err := choosePlatform(context.Background(), "", dir, "runsc v2", h); err != nil {
		t.Fatal(err)
	}
	if boots != 2 {
		t.Fatalf("boot tests after a runsc upgrade: %d, want 2", boots)
	}
	// A garbled record is ignored, not an error.
	if err := os.WriteFile(filepath.Join(dir, "platform.json"), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := choosePlatform(context.Background(), "", dir, "runsc v2", h); err != nil || got.Platform != "kvm" {
		t.Fatalf("after a garbled record: %+v, %v", got, err)
	}
}

// TestBootTestSystrap runs the real boot test on this machine's runsc with
// the systrap platform, which works everywhere runsc does.
func TestBootTestSystrap(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runsc do needs root")
	}
	r, err := New(Config{Root: t.TempDir(), Platform: "systrap"})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("runsc: %v", err)
		}
		t.Skipf("runsc: %v", err)
	}
	if err := r.bootTest(context.Background(), "systrap"); err != nil {
		t.Fatalf("systrap boot test: %v", err)
	}
}
