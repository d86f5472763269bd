package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Platform choice. runsc's kvm platform is the fast one where KVM works;
// systrap works everywhere. A machine can have a /dev/kvm on which KVM does
// not work (a VM without nested virtualisation): runsc --platform=kvm then
// hangs with the sandbox spinning (PLATFORM.md). So the platform is chosen
// by a probe, never by the file's existence alone:
//
//  1. /dev/kvm must open and answer KVM_GET_API_VERSION (12) and
//     KVM_CREATE_VM;
//  2. the CPU must advertise vmx or svm in /proc/cpuinfo (a quick negative
//     that spares the boot test on the machines where it would hang);
//  3. `runsc --platform=kvm do true` must finish within ProbeTimeout.
//
// The answer is remembered in the data dir (platform.json) for the same
// runsc version and the same boot of the host kernel.

// ProbeTimeout bounds the runsc boot test of the kvm platform.
const ProbeTimeout = 8 * time.Second

// PlatformChoice is the platform sbxd runs sandboxes on and why.
type PlatformChoice struct {
	// Platform is runsc's --platform value: "kvm" or "systrap" (or what
	// the operator asked for).
	Platform string `json:"platform"`
	// Reason says why, in a sentence, e.g. "KVM works (runsc boot test
	// 0.3 s)" or "/dev/kvm exists but the CPU has no vmx/svm flag".
	Reason string `json:"reason"`
}

// probeRecord is platform.json in the data dir.
type probeRecord struct {
	PlatformChoice
	RunscVersion string `json:"runsc_version"`
	BootID       string `json:"boot_id"`
}

// probeHooks are the machine facts the probe reads; tests replace them.
type probeHooks struct {
	checkDevice func() error                                     // nil when /dev/kvm can create a VM
	cpuVirt     func() bool                                      // vmx or svm in /proc/cpuinfo
	bootTest    func(ctx context.Context, platform string) error // runsc --platform=P do true
}

// ErrKVMUnusable is returned by ChoosePlatform when the operator asked for
// kvm and KVM does not work on this machine.
var ErrKVMUnusable = errors.New("the kvm platform does not work on this machine")

// ChoosePlatform picks the runsc platform. want is the operator's choice
// ("" = by probe; "kvm" = kvm, verified; anything else is taken as is).
// stateDir holds platform.json, the remembered answer. It returns
// ErrKVMUnusable (wrapped, with the reason) when want is "kvm" and the
// probe fails; it never waits longer than about ProbeTimeout.
func (r *Runtime) ChoosePlatform(ctx context.Context, want, stateDir string) (PlatformChoice, error) {
	h := probeHooks{
		checkDevice: checkKVMDevice,
		cpuVirt:     cpuHasVirt,
		bootTest:    r.bootTest,
	}
	return choosePlatform(ctx, want, stateDir, r.version, h)
}

func choosePlatform(ctx context.Context, want, stateDir, runscVersion string, h probeHooks) (PlatformChoice, error) {
	switch want {
	case "", "kvm":
	default:
		return PlatformChoice{Platform: want, Reason: "chosen by the operator"}, nil
	}
	bootID := readBootID()
	recPath := filepath.Join(stateDir, "platform.json")
	if b, err := os.ReadFile(recPath); err == nil {
		var rec probeRecord
		if json.Unmarshal(b, &rec) == nil && rec.RunscVersion == runscVersion && rec.BootID == bootID && rec.Platform != "" {
			return finishChoice(want, rec.PlatformChoice)
		}
	}
	c := probe(ctx, h)
	if b, err := json.Marshal(probeRecord{PlatformChoice: c, RunscVersion: runscVersion, BootID: bootID}); err == nil {
		_ = os.WriteFile(recPath, b, 0o600)
	}
	return finishChoice(want, c)
}

func finishChoice(want string, c PlatformChoice) (PlatformChoice, error) {
	if want == "kvm" {
		if c.Platform != "kvm" {
			return c, fmt.Errorf("%w: %s (use --platform systrap, or leave --platform empty to choose by probe)", ErrKVMUnusable, c.Reason)
		}
		c.Reason = "chosen by the operator; " + c.Reason
	}
	return c, nil
}

func probe(ctx context.Context, h probeHooks) PlatformChoice {
	systrap := func(why string) PlatformChoice { return PlatformChoice{Platform: "systrap", Reason: why} }
	if err := h.checkDevice(); err != nil {
		return systrap(err.Error())
	}
	if !h.cpuVirt() {
		return systrap("/dev/kvm exists but the CPU has no vmx/svm flag (no nested virtualisation)")
	}
	start := time.Now()
	if err := h.bootTest(ctx, "kvm"); err != nil {
		return systrap("runsc did not boot a sandbox on kvm: " + err.Error())
	}
	return PlatformChoice{Platform: "kvm", Reason: fmt.Sprintf("KVM works (runsc boot test %.1f s)", time.Since(start).Seconds())}
}

// KVM ioctls, from linux/kvm.h.
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
)

func checkKVMDevice() error {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errors.New("no /dev/kvm")
		}
		return fmt.Errorf("/dev/kvm does not open: %v", err)
	}
	defer unix.Close(fd)
	v, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmGetAPIVersion, 0)
	if errno != 0 || v != 12 {
		return fmt.Errorf("/dev/kvm answers KVM_GET_API_VERSION with %d (%v), not 12", v, errno)
	}
	vm, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCreateVM, 0)
	if errno != 0 {
		return fmt.Errorf("/dev/kvm refuses KVM_CREATE_VM: %v", errno)
	}
	unix.Close(int(vm))
	return nil
}

func cpuHasVirt() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("flags")) {
			continue
		}
		for _, f := range strings.Fields(string(line)) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
	}
	return false
}

func readBootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

// bootTest runs `runsc --platform=P do true` in a throwaway state dir,
// bounded by ProbeTimeout. On a timeout it kills every process runsc
// started for the test (they carry the state dir in their arguments).
func (r *Runtime) bootTest(ctx context.Context, platform string) error {
	root, err := os.MkdirTemp(r.cfg.Root, "probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.cfg.Runsc, "--root="+root, "--platform="+platform,
		"--network=none", "--ignore-cgroups", "do", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	killByArg(root)
	if ctx.Err() != nil {
		return fmt.Errorf("no answer in %s", ProbeTimeout)
	}
	if err != nil {
		msg := strings.TrimSpace(out.String())
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		return fmt.Errorf("%v: %s", err, msg)
	}
	return nil
}

// killByArg SIGKILLs every process whose command line contains arg.
func killByArg(arg string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(arg)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
