package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/sbxhq/sbx/api"
)

// Suspend captures the sandbox's memory and disk, stores them, and
// releases its CPU and memory (POST .../suspend); the sandbox object
// becomes suspended. With wakeOn, posting an event to that key resumes it
// (an event posted to the key earlier resumes it at once). Any request
// that needs it running (exec, files, ports) resumes it too.
//
// Errors: *Error with code sandbox_has_volume, conflict (not running, or
// busy), invalid_argument (wakeOn) or suspend_failed (it runs on).
func (sb *Sandbox) Suspend(ctx context.Context, wakeOn string) error {
	return sb.SuspendStream(ctx, wakeOn, nil)
}

// SuspendStream is Suspend with progress lines.
func (sb *Sandbox) SuspendStream(ctx context.Context, wakeOn string, progress Progress) error {
	var out api.Sandbox
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "suspend"), nil, api.SuspendRequest{WakeOn: wakeOn}, "", progress, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Resume restores a suspended sandbox, running, with its processes
// (POST .../resume). A running sandbox is left as it is.
//
// Errors: *Error with code conflict (stopped) or resume_failed (it stays
// suspended).
func (sb *Sandbox) Resume(ctx context.Context) error {
	var out api.Sandbox
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "resume"), nil, nil, "", nil, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Events returns the events delivered to the sandbox (why it woke),
// oldest first.
func (sb *Sandbox) Events(ctx context.Context) ([]api.Event, error) {
	var out []api.Event
	err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "events"), nil, nil, &out)
	return out, err
}

// Update renames the sandbox, replaces its labels, changes its idle
// timeout (timeout_ms) and keep-alive (PUT /v1/sandboxes/{name}); nil
// fields stay.
//
// Errors: *Error with code invalid_argument, sandbox_not_found, name_taken
// (a rename to a name in use) or conflict (another operation runs).
func (sb *Sandbox) Update(ctx context.Context, req api.UpdateSandboxRequest) error {
	var out api.Sandbox
	if err := sb.c.doJSON(ctx, http.MethodPut, sbPath(sb.ID), nil, req, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Events posts events: POST /v1/events/{key}.
type Events struct {
	c *Client
}

// Post posts an event to key: every sandbox suspended with that wake_on
// resumes and receives it; when none waits, it is kept for one that
// suspends on the key later (for sbxd's event retention, 24 h by
// default). data is at most 1 MiB; contentType "" sends it as JSON when
// it is JSON, else as application/octet-stream.
//
// Errors: *Error with code invalid_argument (key) or too_large.
func (e *Events) Post(ctx context.Context, key string, data []byte, contentType string) (*api.EventResult, error) {
	if contentType == "" {
		contentType = "application/octet-stream"
		if json.Valid(data) {
			contentType = "application/json"
		}
	}
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	resp, err := e.c.request(ctx, http.MethodPost, "/v1/events/"+strings.Join(parts, "/"), nil, bytes.NewReader(data), contentType, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out api.EventResult
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	return &out, nil
}
