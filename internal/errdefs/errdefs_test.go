package errdefs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sbxhq/sbx/api"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code api.Code
	}{
		{New(ErrSandboxNotFound, "no sandbox named %q", "x"), api.CodeSandboxNotFound},
		{fmt.Errorf("wrapped: %w", New(ErrImageNotFound, "no image")), api.CodeImageNotFound},
		{Invalid("name", "bad"), api.CodeInvalidArgument},
		{Conflictf("busy"), api.CodeConflict},
		{New(ErrNameTaken, "taken"), api.CodeNameTaken},
		{fmt.Errorf("x: %w", ErrCheckpointFailed), api.CodeCheckpointFailed},
		{New(ErrPortUnreachable, "nothing listens on port 3000"), api.CodePortUnreachable},
		{errors.New("disk exploded"), api.CodeInternal},
		{nil, api.CodeInternal},
	} {
		if got := Code(tc.err); got != tc.code {
			t.Errorf("Code(%v) = %s, want %s", tc.err, got, tc.code)
		}
	}
	if !IsNotFound(New(ErrFileNotFound, "f")) {
		t.Error("file not found is not IsNotFound")
	}
	if Public(errors.New("/var/lib/sbx/secret path")) {
		t.Error("an unclassified error is public")
	}
}

func TestMessagesDoNotRepeatTheClass(t *testing.T) {
	if got := Invalid("cpus", "%d is out of range", 99).Error(); got != "cpus: 99 is out of range" {
		t.Fatalf("%q", got)
	}
}
