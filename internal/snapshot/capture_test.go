package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeRuntime records the calls Capture makes, in order with the hooks',
// and fails the ones named in fail.
type fakeRuntime struct {
	calls []string
	fail  map[string]bool
}

func (f *fakeRuntime) call(name string) error {
	f.calls = append(f.calls, name)
	if f.fail[name] {
		return errors.New(name + " failed")
	}
	return nil
}

func (f *fakeRuntime) Pause(_ context.Context, id string) error  { return f.call("pause") }
func (f *fakeRuntime) Resume(_ context.Context, id string) error { return f.call("resume") }

func (f *fakeRuntime) Checkpoint(_ context.Context, id, dir string) error {
	if err := f.call("checkpoint"); err != nil {
		// What a checkpoint cut short leaves behind.
		_ = os.MkdirAll(dir, 0o700)
		_ = os.WriteFile(filepath.Join(dir, "pages.img"), []byte("half"), 0o600)
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("state"), 0o600)
}

// captureWith runs Capture on a fake runtime failing the steps in fail
// (runtime calls and the hooks "quiesce", "disk"), and returns the calls
// in order, the image dir and a file beside it that nothing may remove.
func captureWith(t *testing.T, hold bool, fail ...string) (*Captured, []string, string, string, error) {
	t.Helper()
	f := &fakeRuntime{fail: map[string]bool{}}
	for _, s := range fail {
		f.fail[s] = true
	}
	parent := t.TempDir()
	other := filepath.Join(parent, "other-image")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "tmp-snap")
	c, err := Capture(context.Background(), CaptureOptions{
		Runtime: f, ID: "sb1", Dir: dir, SpecVersion: 7,
		Quiesce: func(context.Context) error { return f.call("quiesce") },
		Wake:    func(context.Context) { f.calls = append(f.calls, "wake") },
		Disk:    func(context.Context) error { return f.call("disk") },
		Hold:    hold,
		Fault:   func(p Point) { f.calls = append(f.calls, "fault:"+string(p)) },
	})
	return c, f.calls, dir, other, err
}

func assertCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

func assertKept(t *testing.T, other string) {
	t.Helper()
	if b, err := os.ReadFile(other); err != nil || string(b) != "keep" {
		t.Fatalf("a file beside the image dir: %q, %v", b, err)
	}
}

func assertGone(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed capture's image dir is left: %v", err)
	}
}

// A capture quiesces, pauses, takes the disk then the memory, records the
// layout in the image, resumes and wakes, and says how long it paused.
func TestCaptureOrder(t *testing.T) {
	c, calls, dir, other, err := captureWith(t, false)
	if err != nil {
		t.Fatal(err)
	}
	assertCalls(t, calls, "quiesce", "pause", "fault:paused", "disk", "checkpoint", "resume", "wake")
	if c.Dir != dir || c.Paused <= 0 {
		t.Fatalf("captured %+v", c)
	}
	if err := CheckSpec(dir, 7); err != nil {
		t.Fatalf("the image's layout record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		t.Fatal(err)
	}
	assertKept(t, other)
}

// A held capture (a suspend) leaves the sandbox paused and its agent
// quiet: nothing it does afterwards could be kept.
func TestCaptureHold(t *testing.T) {
	c, calls, dir, _, err := captureWith(t, true)
	if err != nil {
		t.Fatal(err)
	}
	assertCalls(t, calls, "quiesce", "pause", "fault:paused", "disk", "checkpoint")
	if c.Dir != dir {
		t.Fatalf("captured %+v", c)
	}
	if err := CheckSpec(dir, 7); err != nil {
		t.Fatal(err)
	}
}

// Every failure after the pause resumes the sandbox and wakes its agent,
// held or not, removes the half-made image and nothing else.
func TestCaptureFailureResumes(t *testing.T) {
	for _, tc := range []struct {
		fail string
		hold bool
		want []string
	}{
		{"disk", false, []string{"quiesce", "pause", "fault:paused", "disk", "resume", "wake"}},
		{"disk", true, []string{"quiesce", "pause", "fault:paused", "disk", "resume", "wake"}},
		{"checkpoint", false, []string{"quiesce", "pause", "fault:paused", "disk", "checkpoint", "resume", "wake"}},
		{"checkpoint", true, []string{"quiesce", "pause", "fault:paused", "disk", "checkpoint", "resume", "wake"}},
		// A resume that fails is tried again before the error returns.
		{"resume", false, []string{"quiesce", "pause", "fault:paused", "disk", "checkpoint", "resume", "resume", "wake"}},
	} {
		t.Run(tc.fail, func(t *testing.T) {
			c, calls, dir, other, err := captureWith(t, tc.hold, tc.fail)
			if err == nil || !strings.Contains(err.Error(), tc.fail+" failed") {
				t.Fatalf("captured %+v, err %v", c, err)
			}
			assertCalls(t, calls, tc.want...)
			assertGone(t, dir)
			assertKept(t, other)
		})
	}
}

// A pause that fails leaves nothing to resume; the agent is woken.
func TestCapturePauseFails(t *testing.T) {
	_, calls, dir, _, err := captureWith(t, false, "pause")
	if err == nil || !strings.Contains(err.Error(), "pause failed") {
		t.Fatal(err)
	}
	assertCalls(t, calls, "quiesce", "pause", "wake")
	assertGone(t, dir)
}

// A quiesce that fails ends the capture before the sandbox is touched.
func TestCaptureQuiesceFails(t *testing.T) {
	_, calls, _, _, err := captureWith(t, false, "quiesce")
	if err == nil || !strings.Contains(err.Error(), "quiesce failed") {
		t.Fatal(err)
	}
	assertCalls(t, calls, "quiesce")
}

// A resume that fails after a failed capture is in the error: the sandbox
// may still be paused.
func TestCaptureResumeFailsAfterFailure(t *testing.T) {
	_, calls, _, _, err := captureWith(t, false, "disk", "resume")
	if err == nil || !strings.Contains(err.Error(), "disk failed") || !strings.Contains(err.Error(), "resume failed") {
		t.Fatal(err)
	}
	assertCalls(t, calls, "quiesce", "pause", "fault:paused", "disk", "resume", "wake")
}
