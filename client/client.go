// Package client is the Go SDK of sbx: a typed client of sbxd's REST API v1
// (docs/api.md) over its Unix socket or over TCP with an API key.
//
//	c, err := client.New()                      // $SBX_URL or the local socket
//	sb, err := c.Sandboxes.Create(ctx, api.CreateSandboxRequest{Name: "dev"})
//	res, err := sb.Exec(ctx, "python3 -m unittest")
//	fmt.Print(res.Stdout, res.ExitCode)
//
// Errors from the API are *Error values carrying the API's code; compare
// them with errors.Is against the Err* values (ErrSandboxNotFound, ...).
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sbxhq/sbx/api"
)

// DefaultSocket is where sbxd listens when SBX_SOCKET is not set.
const DefaultSocket = "/run/sbx/sbx.sock"

// Client talks to one sbxd.
type Client struct {
	base   *url.URL
	hc     *http.Client
	apiKey string
	// socket is true when base is a placeholder for a Unix socket.
	socket bool

	// Sandboxes creates, finds and deletes sandboxes.
	Sandboxes *Sandboxes
	// Images lists, builds, pulls, imports and removes images.
	Images *Images
	// Snapshots lists, gets and deletes memory snapshots.
	Snapshots *Snapshots
	// Deliveries lists and reads delivery records and archives.
	Deliveries *Deliveries
	// Events posts events that wake suspended sandboxes.
	Events *Events
	// Keys makes, lists and revokes API keys.
	Keys *Keys
}

// Option configures a Client.
type Option func(*Client) error

// WithSocket talks to sbxd over the Unix socket at path.
func WithSocket(path string) Option {
	return func(c *Client) error {
		c.base, _ = url.Parse("http://sbxd")
		c.socket = true
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConnsPerHost: 16,
		}}
		return nil
	}
}

// WithURL talks to sbxd over TCP at rawURL, e.g. "http://127.0.0.1:7070".
func WithURL(rawURL string) Option {
	return func(c *Client) error {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("sbx URL %q: want http://host:port", rawURL)
		}
		c.base = u
		c.socket = false
		c.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		return nil
	}
}

// WithAPIKey sends key as a bearer token (required over TCP).
func WithAPIKey(key string) Option {
	return func(c *Client) error { c.apiKey = key; return nil }
}

// WithHTTPClient replaces the HTTP client (after WithSocket or WithURL).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error { c.hc = hc; return nil }
}

// New returns a client. Without options it uses $SBX_URL (with
// $SBX_API_KEY) when set, else the socket $SBX_SOCKET or DefaultSocket.
func New(opts ...Option) (*Client, error) {
	c := &Client{}
	var defaults []Option
	if u := os.Getenv("SBX_URL"); u != "" {
		defaults = append(defaults, WithURL(u), WithAPIKey(os.Getenv("SBX_API_KEY")))
	} else {
		sock := os.Getenv("SBX_SOCKET")
		if sock == "" {
			sock = DefaultSocket
		}
		defaults = append(defaults, WithSocket(sock))
	}
	for _, o := range append(defaults, opts...) {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.Sandboxes = &Sandboxes{c: c}
	c.Images = &Images{c: c}
	c.Snapshots = &Snapshots{c: c}
	c.Deliveries = &Deliveries{c: c}
	c.Events = &Events{c: c}
	c.Keys = &Keys{c: c}
	return c, nil
}

// Health answers GET /v1/health.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.doJSON(ctx, http.MethodGet, "/v1/health", nil, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Error is an error answer of the API.
type Error struct {
	// Status is the HTTP status (0 for an error line of an NDJSON stream,
	// and for a stream that ended before its final line: code unavailable).
	Status    int
	Code      api.Code
	Message   string
	RequestID string
}

func (e *Error) Error() string {
	if e.RequestID != "" {
		return fmt.Sprintf("%s: %s (request %s)", e.Code, e.Message, e.RequestID)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches an *Error with the same code, and ErrNotFound matches every
// not-found code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if t == ErrNotFound {
		return e.Code.HTTPStatus() == http.StatusNotFound
	}
	return t.Code == e.Code && t.Message == ""
}

// Errors to compare with errors.Is, one per API code.
var (
	ErrInvalidArgument    = &Error{Code: api.CodeInvalidArgument}
	ErrUnauthorized       = &Error{Code: api.CodeUnauthorized}
	ErrForbidden          = &Error{Code: api.CodeForbidden}
	ErrKeyNotFound        = &Error{Code: api.CodeKeyNotFound}
	ErrNotFound           = &Error{Code: api.CodeNotFound}
	ErrSandboxNotFound    = &Error{Code: api.CodeSandboxNotFound}
	ErrCheckpointNotFound = &Error{Code: api.CodeCheckpointNotFound}
	ErrSnapshotNotFound   = &Error{Code: api.CodeSnapshotNotFound}
	ErrImageNotFound      = &Error{Code: api.CodeImageNotFound}
	ErrFileNotFound       = &Error{Code: api.CodeFileNotFound}
	ErrProcessNotFound    = &Error{Code: api.CodeProcessNotFound}
	ErrEventNotFound      = &Error{Code: api.CodeEventNotFound}
	ErrMethodNotAllowed   = &Error{Code: api.CodeMethodNotAllowed}
	ErrNameTaken          = &Error{Code: api.CodeNameTaken}
	ErrConflict           = &Error{Code: api.CodeConflict}
	ErrSandboxHasVolume   = &Error{Code: api.CodeSandboxHasVolume}
	ErrTooLarge           = &Error{Code: api.CodeTooLarge}
	ErrQuotaExceeded      = &Error{Code: api.CodeQuotaExceeded}
	ErrCheckpointFailed   = &Error{Code: api.CodeCheckpointFailed}
	ErrRestoreFailed      = &Error{Code: api.CodeRestoreFailed}
	ErrSnapshotFailed     = &Error{Code: api.CodeSnapshotFailed}
	ErrForkFailed         = &Error{Code: api.CodeForkFailed}
	ErrSuspendFailed      = &Error{Code: api.CodeSuspendFailed}
	ErrResumeFailed       = &Error{Code: api.CodeResumeFailed}
	ErrInternal           = &Error{Code: api.CodeInternal}
	ErrUnavailable        = &Error{Code: api.CodeUnavailable}
	ErrPortUnreachable    = &Error{Code: api.CodePortUnreachable}
	ErrPortTimeout        = &Error{Code: api.CodePortTimeout}
)

// request sends a request; body may be nil, an io.Reader (sent as is with
// contentType) or a value sent as JSON.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, body any, contentType, accept string) (*http.Response, error) {
	// path's segments are escaped (url.PathEscape): keep them as they are.
	u := *c.base
	raw := strings.TrimSuffix(u.EscapedPath(), "/") + path
	unescaped, err := url.PathUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("bad path %q: %w", path, err)
	}
	u.Path, u.RawPath = unescaped, raw
	u.RawQuery = query.Encode()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(buf)
		contentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sbxd: %w", err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var er api.ErrorResponse
	if err := json.Unmarshal(b, &er); err != nil || er.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: codeOfStatus(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	}
	return &Error{Status: resp.StatusCode, Code: er.Error.Code, Message: er.Error.Message, RequestID: er.Error.RequestID}
}

func codeOfStatus(s int) api.Code {
	switch s {
	case 400:
		return api.CodeInvalidArgument
	case 401:
		return api.CodeUnauthorized
	case 403:
		return api.CodeForbidden
	case 404:
		return api.CodeNotFound
	case 409:
		return api.CodeConflict
	case 413:
		return api.CodeTooLarge
	case 503:
		return api.CodeUnavailable
	}
	return api.CodeInternal
}

// doJSON sends body as JSON and decodes a JSON answer into out (if not nil).
func (c *Client) doJSON(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.request(ctx, method, path, query, body, "", "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// Progress receives the info lines of a long operation.
type Progress func(msg string, at time.Time)

// readStream reads a long operation's NDJSON answer: info lines go to
// progress, the complete line's data is decoded into out, an error line is
// returned as *Error.
func readStream(resp *http.Response, progress Progress, out any) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var l api.StreamLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			bad := sc.Text()
			if !sc.Scan() {
				// The last, unfinished line of a cut answer.
				return streamCut(sc.Err(), streamCutAdvice)
			}
			return fmt.Errorf("bad NDJSON line %q: %w", bad, err)
		}
		switch l.Type {
		case api.LineInfo:
			if progress != nil {
				var msg string
				_ = json.Unmarshal(l.Data, &msg)
				progress(msg, l.Time)
			}
		case api.LineComplete:
			if out != nil {
				return json.Unmarshal(l.Data, out)
			}
			return nil
		case api.LineError:
			return &Error{Code: l.Code, Message: l.Error, RequestID: l.RequestID}
		}
	}
	return streamCut(sc.Err(), streamCutAdvice)
}

// streamCutAdvice is what to do after a long operation's answer was cut.
const streamCutAdvice = "the operation either finished or is rolled back when sbxd starts again (its journal); " +
	"check what is there with 'sbx ls', 'sbx checkpoints NAME' and 'sbx snapshots' (GET /v1/sandboxes, " +
	"/v1/sandboxes/NAME/checkpoints, /v1/snapshots) before you retry"

// streamCut turns the end of an NDJSON answer that came without its final
// line into an error. err is what reading the body failed with (nil for a
// clean end of the body). The client's own cancel (its context, or Close of
// the stream) is returned as is; anything else (EOF, a reset connection)
// means sbxd went away mid-operation and is an *Error with code
// unavailable whose message says so, then advice.
func streamCut(err error, advice string) error {
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, http.ErrBodyReadAfterClose) || errors.Is(err, net.ErrClosed)) {
		return err
	}
	why := "the answer ended before its final line"
	if err != nil {
		why = fmt.Sprintf("the connection broke before the final line: %v", err)
	}
	return &Error{Code: api.CodeUnavailable,
		Message: fmt.Sprintf("sbxd went away in the middle of the operation (%s); %s", why, advice)}
}

// long runs a long operation and decodes its result into out.
func (c *Client) long(ctx context.Context, method, path string, query url.Values, body any, contentType string, progress Progress, out any) error {
	resp, err := c.request(ctx, method, path, query, body, contentType, "application/x-ndjson")
	if err != nil {
		return err
	}
	return readStream(resp, progress, out)
}
