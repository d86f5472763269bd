// Package errdefs holds the error classes that sbx's layers return and the
// server maps to API error codes (api.Code), in the manner of containerd's
// errdefs. Wrap a class with context, the class last:
//
//	fmt.Errorf("sandbox %q: %w", name, errdefs.ErrSandboxNotFound)
//
// and test with errors.Is. The server's one mapper, [Code], turns a class
// into its code.
package errdefs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sbxhq/sbx/api"
)

// Error classes. The more specific not-found classes wrap ErrNotFound, and
// the operation-failed classes wrap ErrFailed, so errors.Is works on both
// levels.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnauthorized    = errors.New("unauthorized")
	// ErrForbidden: a tenant key asked for what only admin keys may do.
	ErrForbidden = errors.New("forbidden")
	ErrNotFound  = errors.New("not found")
	ErrNameTaken = errors.New("name taken")
	ErrConflict  = errors.New("conflict")
	ErrHasVolume = errors.New("sandbox has a volume")
	ErrTooLarge  = errors.New("too large")
	ErrQuota     = errors.New("quota exceeded")
	// ErrCapacity: the host admits no more (sandbox or snapshot count,
	// CPUs or memory of all sandboxes together).
	ErrCapacity    = errors.New("no capacity")
	ErrUnavailable = errors.New("unavailable")
	ErrFailed      = errors.New("operation failed")
	// ErrCaptureLimit: a capture of a sandbox's disk passed its byte or
	// time limit.
	ErrCaptureLimit = errors.New("capture limit")
	// ErrPortUnreachable: nothing answers on a sandbox's TCP port.
	ErrPortUnreachable = errors.New("port unreachable")
	// ErrPortTimeout: a sandbox's TCP port did not connect or answer
	// within its deadline.
	ErrPortTimeout = errors.New("port timeout")

	ErrSandboxNotFound    = fmt.Errorf("sandbox %w", ErrNotFound)
	ErrImageNotFound      = fmt.Errorf("image %w", ErrNotFound)
	ErrCheckpointNotFound = fmt.Errorf("checkpoint %w", ErrNotFound)
	ErrSnapshotNotFound   = fmt.Errorf("snapshot %w", ErrNotFound)
	ErrFileNotFound       = fmt.Errorf("file %w", ErrNotFound)
	ErrProcessNotFound    = fmt.Errorf("process %w", ErrNotFound)
	ErrEventNotFound      = fmt.Errorf("event %w", ErrNotFound)
	ErrKeyNotFound        = fmt.Errorf("API key %w", ErrNotFound)

	ErrCheckpointFailed = fmt.Errorf("checkpoint %w", ErrFailed)
	ErrRestoreFailed    = fmt.Errorf("restore %w", ErrFailed)
	ErrSnapshotFailed   = fmt.Errorf("snapshot %w", ErrFailed)
	ErrSuspendFailed    = fmt.Errorf("suspend %w", ErrFailed)
	ErrResumeFailed     = fmt.Errorf("resume %w", ErrFailed)
	ErrForkFailed       = fmt.Errorf("fork %w", ErrFailed)
)

// classError is an error of a class whose message is given whole; the
// class is reachable through Unwrap but not repeated in the message.
type classError struct {
	class error
	msg   string
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.class }

// New returns an error of class with a formatted message, e.g.
// errdefs.New(errdefs.ErrSandboxNotFound, "no sandbox named %q", name).
func New(class error, format string, args ...any) error {
	return &classError{class: class, msg: fmt.Sprintf(format, args...)}
}

// Invalid returns an ErrInvalidArgument error whose message names field:
// "field: message".
func Invalid(field, format string, args ...any) error {
	return &classError{class: ErrInvalidArgument, msg: field + ": " + fmt.Sprintf(format, args...)}
}

// Conflictf returns an ErrConflict error with a message.
func Conflictf(format string, args ...any) error {
	return &classError{class: ErrConflict, msg: fmt.Sprintf(format, args...)}
}

// IsNotFound reports whether err is of any not-found class.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidArgument reports whether err is ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsConflict reports whether err is ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// codes lists the classes from most to least specific.
var codes = []struct {
	err  error
	code api.Code
}{
	{ErrSandboxNotFound, api.CodeSandboxNotFound},
	{ErrImageNotFound, api.CodeImageNotFound},
	{ErrCheckpointNotFound, api.CodeCheckpointNotFound},
	{ErrSnapshotNotFound, api.CodeSnapshotNotFound},
	{ErrFileNotFound, api.CodeFileNotFound},
	{ErrProcessNotFound, api.CodeProcessNotFound},
	{ErrEventNotFound, api.CodeEventNotFound},
	{ErrKeyNotFound, api.CodeKeyNotFound},
	{ErrNotFound, api.CodeNotFound},
	{ErrInvalidArgument, api.CodeInvalidArgument},
	{ErrUnauthorized, api.CodeUnauthorized},
	{ErrForbidden, api.CodeForbidden},
	{ErrNameTaken, api.CodeNameTaken},
	{ErrHasVolume, api.CodeSandboxHasVolume},
	{ErrConflict, api.CodeConflict},
	{ErrTooLarge, api.CodeTooLarge},
	{ErrQuota, api.CodeQuotaExceeded},
	{ErrCapacity, api.CodeCapacity},
	{ErrUnavailable, api.CodeUnavailable},
	{ErrPortUnreachable, api.CodePortUnreachable},
	{ErrPortTimeout, api.CodePortTimeout},
	{ErrCaptureLimit, api.CodeCaptureLimit},
	{ErrCheckpointFailed, api.CodeCheckpointFailed},
	{ErrRestoreFailed, api.CodeRestoreFailed},
	{ErrSnapshotFailed, api.CodeSnapshotFailed},
	{ErrForkFailed, api.CodeForkFailed},
	{ErrSuspendFailed, api.CodeSuspendFailed},
	{ErrResumeFailed, api.CodeResumeFailed},
}

// Code returns the API error code of err's class, api.CodeInternal when it
// has none.
func Code(err error) api.Code {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return api.CodeInternal
}

// Public reports whether err's message may be shown to API callers whole:
// a classified error's may, except the operation-failed classes
// (ErrFailed: checkpoint_failed, restore_failed, ...), whose text carries
// what failed underneath (host paths, runsc's specs and output, lines the
// guest wrote to its log); an unclassified (internal) error's may not.
// Callers of a non-public error see its code, a generic message, the
// details added with WithDetail, and the request id.
func Public(err error) bool {
	return Code(err) != api.CodeInternal && !errors.Is(err, ErrFailed)
}

// detailError carries a message written for API callers along an error
// whose own text is not public.
type detailError struct {
	err    error
	detail string
}

func (e *detailError) Error() string { return e.err.Error() }
func (e *detailError) Unwrap() error { return e.err }

// WithDetail adds to err a message that API callers may see even when
// err's own text is not public (Public): say what went wrong in the
// user's terms, with no host path and nothing the guest wrote, e.g.
// WithDetail(err, "the blob store is full").
func WithDetail(err error, format string, args ...any) error {
	return &detailError{err: err, detail: fmt.Sprintf(format, args...)}
}

// Detail returns the messages added to err with WithDetail, outermost
// first, joined by "; " ("" when none).
func Detail(err error) string {
	var out []string
	for err != nil {
		if d, ok := err.(*detailError); ok {
			out = append(out, d.detail)
		}
		err = errors.Unwrap(err)
	}
	return strings.Join(out, "; ")
}
