package cli

import (
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// TestStepRecorder: the step lines of sbxd's progress (whatever their
// order, and among other lines) become named steps; the raw sum is the
// calls to runsc and btrfs only.
func TestStepRecorder(t *testing.T) {
	var r stepRecorder
	p := r.progress()
	p("pausing the sandbox", time.Now())
	p(api.CaptureStepsPrefix+" quiesce 6, runsc pause 41, disk 3, runsc checkpoint 160, runsc resume 45, agent wake 5", time.Now())
	p(api.StartStepsPrefix+" disk 2, netns 6, runsc restore 544, agent 40, bogus, words x", time.Now())
	b := breakdown{Op: "x", TotalMS: 1000, Steps: r.take()}
	if len(b.Steps) != 10 || b.Steps[3] != (benchStep{Name: "runsc checkpoint", MS: 160}) || b.Steps[9] != (benchStep{Name: "agent", MS: 40}) {
		t.Fatalf("steps: %+v", b.Steps)
	}
	if got := b.RawMS(); got != 41+160+45+544 {
		t.Fatalf("raw ms: %v", got)
	}
	p(api.DiskStepsPrefix+" stop 20.5, unmount 1.2, btrfs snapshot 6.25, btrfs qgroup 0.5, swap 3, record 2", time.Now())
	d := breakdown{Op: "restore", TotalMS: 50, Steps: r.take()}
	if len(d.Steps) != 6 || d.Steps[2] != (benchStep{Name: "btrfs snapshot", MS: 6.25}) {
		t.Fatalf("disk steps: %+v", d.Steps)
	}
	if got := d.RawMS(); got != 6.25+0.5 {
		t.Fatalf("raw ms of a restore: %v", got)
	}
	if len(r.take()) != 0 {
		t.Fatal("take did not forget the steps")
	}
}
