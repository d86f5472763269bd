// Package api holds the wire contract of sbx's REST API v1: request and
// response types and the error codes of ../docs/api.md. It imports only the
// standard library so that every client can depend on it.
package api

import "net/http"

// Code is a stable snake_case error code carried in every error body
// ({"error":{"code":...,"message":...}}) and in NDJSON error lines.
type Code string

// Error codes. The HTTP status of each is given by [Code.HTTPStatus].
const (
	// CodeInvalidArgument: a field is malformed or out of range; the message
	// names the field. 400.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeUnauthorized: missing or wrong API key. 401.
	CodeUnauthorized Code = "unauthorized"
	// CodeForbidden: the key is valid but a tenant key, and the request
	// is for admin keys only (managing API keys). 403. An sbx extension.
	CodeForbidden Code = "forbidden"
	// CodeSandboxNotFound: no sandbox has that name or id. 404.
	CodeSandboxNotFound Code = "sandbox_not_found"
	// CodeCheckpointNotFound: the sandbox has no checkpoint with that id. 404.
	CodeCheckpointNotFound Code = "checkpoint_not_found"
	// CodeSnapshotNotFound: no snapshot has that id (or it expired). 404.
	CodeSnapshotNotFound Code = "snapshot_not_found"
	// CodeImageNotFound: no image has that name. 404.
	CodeImageNotFound Code = "image_not_found"
	// CodeFileNotFound: the path does not exist inside the sandbox. 404.
	// An sbx extension of API.md, documented in docs/api.md.
	CodeFileNotFound Code = "file_not_found"
	// CodeProcessNotFound: no process started by exec has that pid (the
	// agent keeps the latest 256 finished ones). 404. An sbx extension.
	CodeProcessNotFound Code = "process_not_found"
	// CodeEventNotFound: no pending event has that id (it was delivered,
	// cancelled or expired). 404. An sbx extension.
	CodeEventNotFound Code = "event_not_found"
	// CodeKeyNotFound: no live API key has that id or name. 404. An sbx
	// extension.
	CodeKeyNotFound Code = "key_not_found"
	// CodeNotFound: the route does not exist. 404.
	CodeNotFound Code = "not_found"
	// CodeMethodNotAllowed: the route exists for other methods (see the
	// Allow header). 405.
	CodeMethodNotAllowed Code = "method_not_allowed"
	// CodeNameTaken: create with a name already in use. 409.
	CodeNameTaken Code = "name_taken"
	// CodeConflict: another operation on the sandbox is in progress, or its
	// state forbids the request; the message says which. 409.
	CodeConflict Code = "conflict"
	// CodeSandboxHasVolume: memory snapshot, fork or suspend of a sandbox
	// with a volume attached. 409.
	CodeSandboxHasVolume Code = "sandbox_has_volume"
	// CodeTooLarge: the request body is larger than the endpoint accepts. 413.
	CodeTooLarge Code = "too_large"
	// CodeQuotaExceeded: a spending or resource limit would be passed. 429.
	CodeQuotaExceeded Code = "quota_exceeded"
	// CodeCaptureLimit: capturing the sandbox's disk (a checkpoint, snapshot,
	// fork or suspend) passed its limit of bytes read or of time; nothing
	// was changed. 507. An sbx extension.
	CodeCaptureLimit Code = "capture_limit"
	// CodeCapacity: the host has no room for the request: the number of
	// sandboxes or snapshots is at its limit, or the sandboxes' CPUs or
	// memory together would pass what the host admits (docs/security.md,
	// Limits). Retry after deleting or suspending sandboxes. 429. An sbx
	// extension.
	CodeCapacity Code = "capacity"
	// CodeCheckpointFailed: a disk checkpoint failed; nothing was changed. 500.
	CodeCheckpointFailed Code = "checkpoint_failed"
	// CodeRestoreFailed: a restore failed; the disk is as it was. 500.
	CodeRestoreFailed Code = "restore_failed"
	// CodeSnapshotFailed: a memory snapshot failed; nothing was changed. 500.
	CodeSnapshotFailed Code = "snapshot_failed"
	// CodeForkFailed: a fork failed; nothing was changed. 500.
	CodeForkFailed Code = "fork_failed"
	// CodeSuspendFailed: a suspend failed; the sandbox runs as before. 500.
	// An sbx extension.
	CodeSuspendFailed Code = "suspend_failed"
	// CodeResumeFailed: a resume failed; the sandbox is still suspended,
	// its memory and disk in the blob store. 500. An sbx extension.
	CodeResumeFailed Code = "resume_failed"
	// CodePortUnreachable: a request to a sandbox's port (a preview) found
	// nothing listening there, or the connection failed. 502. An sbx
	// extension.
	CodePortUnreachable Code = "port_unreachable"
	// CodePortTimeout: a request to a sandbox's port (a preview) got no
	// connection, or no answer, within its deadline: the connection did not
	// open within 30 s, the program's response head did not arrive within
	// 5 min, or its response body sent nothing for 2 min. 504. An sbx
	// extension.
	CodePortTimeout Code = "port_timeout"
	// CodeInternal: anything else; logged by sbxd with the request id. 500.
	CodeInternal Code = "internal"
	// CodeUnavailable: sbxd is shutting down or a dependency (runsc, the
	// image builder) is not ready. 503.
	CodeUnavailable Code = "unavailable"
)

// HTTPStatus returns the HTTP status code that goes with c; unknown codes
// map to 500.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeSandboxNotFound, CodeCheckpointNotFound, CodeSnapshotNotFound,
		CodeImageNotFound, CodeFileNotFound, CodeProcessNotFound, CodeEventNotFound, CodeKeyNotFound, CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeNameTaken, CodeConflict, CodeSandboxHasVolume:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeQuotaExceeded, CodeCapacity:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodePortUnreachable:
		return http.StatusBadGateway
	case CodePortTimeout:
		return http.StatusGatewayTimeout
	case CodeCaptureLimit:
		return http.StatusInsufficientStorage
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the object under "error" in a non-streamed error response.
type ErrorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// RequestID identifies the request in sbxd's log; set on 5xx answers.
	RequestID string `json:"request_id,omitempty"`
}

// ErrorResponse is the body of every non-2xx, non-streamed answer:
// {"error":{"code":"snake_case_code","message":"human text"}}.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}
