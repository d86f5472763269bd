package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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
	return sb.ResumeStream(ctx, nil)
}

// ResumeStream is Resume with progress lines.
func (sb *Sandbox) ResumeStream(ctx context.Context, progress Progress) error {
	var out api.Sandbox
	if err := sb.c.long(ctx, http.MethodPost, sbPath(sb.ID, "resume"), nil, nil, "", progress, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Events returns every event delivered to the sandbox (why it woke),
// oldest first, reading page after page (EventsPage).
func (sb *Sandbox) Events(ctx context.Context) ([]api.Event, error) {
	out := []api.Event{}
	cursor := ""
	for {
		page, next, err := sb.EventsPage(ctx, PageOptions{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// PageOptions select a page of a paged list: after Cursor (the next
// cursor of the previous page; "" for the first), at most Limit entries
// (0: the server's default, 100; at most 1000). sbxd also ends a page of
// events after 4 MiB of bodies.
type PageOptions struct {
	Cursor string
	Limit  int
}

func (o PageOptions) query() url.Values {
	q := url.Values{}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// getEvents reads one page of events and the next page's cursor ("" after
// the last page).
func (c *Client) getEvents(ctx context.Context, path string, q url.Values) ([]api.Event, string, error) {
	resp, err := c.request(ctx, http.MethodGet, path, q, nil, "", "application/json")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var out []api.Event
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, "", fmt.Errorf("decode GET %s answer: %w", path, err)
	}
	return out, resp.Header.Get(api.HeaderNextCursor), nil
}

// EventsPage returns one page of the events delivered to the sandbox,
// oldest first, and the cursor of the next page ("" after the last).
//
// Errors: *Error with code sandbox_not_found or invalid_argument (limit,
// cursor).
func (sb *Sandbox) EventsPage(ctx context.Context, o PageOptions) ([]api.Event, string, error) {
	return sb.c.getEvents(ctx, sbPath(sb.ID, "events"), o.query())
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

// Pending returns one page of the events that wait for a sandbox to
// suspend on their key (of key; every key when key is ""), oldest first,
// with their expire_time, and the cursor of the next page ("" after the
// last).
//
// Errors: *Error with code invalid_argument (key, limit, cursor).
func (e *Events) Pending(ctx context.Context, key string, o PageOptions) ([]api.Event, string, error) {
	q := o.query()
	if key != "" {
		q.Set("key", key)
	}
	return e.c.getEvents(ctx, "/v1/events", q)
}

// Cancel deletes a pending event (DELETE /v1/events/{id}).
//
// Errors: *Error with code event_not_found (delivered, cancelled or
// expired): errors.Is(err, ErrEventNotFound).
func (e *Events) Cancel(ctx context.Context, id string) error {
	return e.c.doJSON(ctx, http.MethodDelete, "/v1/events/"+url.PathEscape(id), nil, nil, nil)
}

// CancelKey deletes every pending event of key (DELETE /v1/events?key=)
// and returns how many there were.
//
// Errors: *Error with code invalid_argument (key).
func (e *Events) CancelKey(ctx context.Context, key string) (int, error) {
	var out api.CancelEventsResult
	err := e.c.doJSON(ctx, http.MethodDelete, "/v1/events", url.Values{"key": {key}}, nil, &out)
	return out.Cancelled, err
}
