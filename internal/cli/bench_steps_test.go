package cli

import (
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

// TestStepRecorder: the step lines of sbxd's progress (whatever their
// order, and among other lines) become named steps; the runsc sum is the
// calls to runsc only.
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
	if got := b.RunscMS(); got != 41+160+45+544 {
		t.Fatalf("runsc ms: %v", got)
	}
	if len(r.take()) != 0 {
		t.Fatal("take did not forget the steps")
	}
}
