package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
	"github.com/sbxhq/sbx/internal/runtime"
)

// TestFailClassUnresponsive: a capture cut by the runtime's own deadline
// answers 503 unavailable whose message (the public text of an
// unavailable error) says the sandbox does not answer; other failures
// keep their class.
func TestFailClassUnresponsive(t *testing.T) {
	cut := fmt.Errorf("freeze: %w", cutVerb{})
	err := fmt.Errorf("checkpoint of web: %v: %w", cut, failClass(cut, errdefs.ErrCheckpointFailed))
	if code := errdefs.Code(err); code != api.CodeUnavailable {
		t.Fatalf("code %q, want unavailable", code)
	}
	if !errdefs.Public(err) || !strings.Contains(err.Error(), "the sandbox does not answer") {
		t.Fatalf("message %q does not say the sandbox does not answer", err)
	}
	other := fmt.Errorf("checkpoint of web: disk: %w", failClass(fmt.Errorf("disk"), errdefs.ErrCheckpointFailed))
	if code := errdefs.Code(other); code != api.CodeCheckpointFailed {
		t.Fatalf("another failure: code %q, want checkpoint_failed", code)
	}
}

// cutVerb is a runsc call cut by its own deadline, as the gvisor runtime
// reports one: its text says so in runsc's words only.
type cutVerb struct{}

func (cutVerb) Error() string        { return "runsc pause x: context deadline exceeded (signal: killed)" }
func (cutVerb) Is(target error) bool { return target == runtime.ErrUnresponsive }
