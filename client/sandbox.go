package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sbxhq/sbx/api"
)

// Sandboxes is the sandbox collection of one client.
type Sandboxes struct{ c *Client }

// Sandbox is a sandbox handle: the object as last read, plus methods.
type Sandbox struct {
	api.Sandbox
	c *Client
}

func (s *Sandboxes) wrap(v api.Sandbox) *Sandbox { return &Sandbox{Sandbox: v, c: s.c} }

func sbPath(name string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Create creates and starts a sandbox (201). Errors: ErrInvalidArgument,
// ErrNameTaken, ErrImageNotFound.
func (s *Sandboxes) Create(ctx context.Context, req api.CreateSandboxRequest) (*Sandbox, error) {
	var out api.Sandbox
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &out); err != nil {
		return nil, err
	}
	return s.wrap(out), nil
}

// CreateStream creates a sandbox while streaming progress (e.g. the build
// of the default image on first use).
func (s *Sandboxes) CreateStream(ctx context.Context, req api.CreateSandboxRequest, progress Progress) (*Sandbox, error) {
	var out api.Sandbox
	if err := s.c.long(ctx, http.MethodPost, "/v1/sandboxes", nil, req, "", progress, &out); err != nil {
		return nil, err
	}
	return s.wrap(out), nil
}

// Get finds a sandbox by name or id; ErrSandboxNotFound if none.
func (s *Sandboxes) Get(ctx context.Context, name string) (*Sandbox, error) {
	var out api.Sandbox
	if err := s.c.doJSON(ctx, http.MethodGet, sbPath(name), nil, nil, &out); err != nil {
		return nil, err
	}
	return s.wrap(out), nil
}

// List returns the sandboxes that carry all of labels (nil for all).
func (s *Sandboxes) List(ctx context.Context, labels map[string]string) ([]*Sandbox, error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	var out []api.Sandbox
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &out); err != nil {
		return nil, err
	}
	res := make([]*Sandbox, 0, len(out))
	for _, v := range out {
		res = append(res, s.wrap(v))
	}
	return res, nil
}

// ListPage lists one page of the sandboxes carrying all of labels, oldest
// first: at most limit (1 to 1000), after the page that token ended (""
// the first). next is the token of the page after it, "" on the last page
// (GET /v1/sandboxes?limit=&page_token=, its X-Next-Page-Token header).
// Errors: *Error with code invalid_argument (limit, page_token).
func (s *Sandboxes) ListPage(ctx context.Context, labels map[string]string, limit int, token string) (page []*Sandbox, next string, err error) {
	q := url.Values{}
	for k, v := range labels {
		q.Add("label", k+"="+v)
	}
	q.Set("limit", strconv.Itoa(limit))
	if token != "" {
		q.Set("page_token", token)
	}
	resp, err := s.c.request(ctx, http.MethodGet, "/v1/sandboxes", q, nil, "", "application/json")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var out []api.Sandbox
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, "", fmt.Errorf("decode GET /v1/sandboxes answer: %w", err)
	}
	page = make([]*Sandbox, 0, len(out))
	for _, v := range out {
		page = append(page, s.wrap(v))
	}
	return page, resp.Header.Get("X-Next-Page-Token"), nil
}

// Delete stops a sandbox and deletes everything it owns.
func (s *Sandboxes) Delete(ctx context.Context, name string) error {
	return s.c.doJSON(ctx, http.MethodDelete, sbPath(name), nil, nil, nil)
}

// Refresh rereads the sandbox's object.
func (sb *Sandbox) Refresh(ctx context.Context) error {
	var out api.Sandbox
	if err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID), nil, nil, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// Delete deletes the sandbox.
func (sb *Sandbox) Delete(ctx context.Context) error { return sb.c.Sandboxes.Delete(ctx, sb.ID) }

// Stop stops the sandbox's processes; its disk stays and the next exec
// boots it again.
func (sb *Sandbox) Stop(ctx context.Context) error {
	var out api.Sandbox
	if err := sb.c.doJSON(ctx, http.MethodPost, sbPath(sb.ID, "stop"), nil, nil, &out); err != nil {
		return err
	}
	sb.Sandbox = out
	return nil
}

// ExecResult is a finished command.
type ExecResult = api.ExecResult

// Exec runs a shell command line (sh -c cmd) in /workspace and waits for it.
// A non-zero exit is not an error: read ExitCode.
func (sb *Sandbox) Exec(ctx context.Context, cmd string) (*ExecResult, error) {
	return sb.Run(ctx, api.ExecRequest{Cmd: []string{"sh", "-c", cmd}})
}

// Run runs req and waits for it, buffering its output (up to
// api.MaxBufferedOutput bytes of each stream). Errors: ErrInvalidArgument
// for a missing executable or cwd, ErrSandboxNotFound, ErrConflict.
func (sb *Sandbox) Run(ctx context.Context, req api.ExecRequest) (*ExecResult, error) {
	var out ExecResult
	if err := sb.c.doJSON(ctx, http.MethodPost, sbPath(sb.ID, "exec"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExecStream is a command whose output streams as it comes.
type ExecStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	b64  bool
	err  error
	exit *api.ExecEvent
	// PID is the process id inside the sandbox, once the start line came.
	PID int
}

func newExecStream(resp *http.Response, b64 bool) *ExecStream {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &ExecStream{body: resp.Body, sc: sc, b64: b64}
}

// Stream starts req and returns its output as it comes. The caller reads
// Events (or calls Wait) and Closes the stream; closing early kills the
// process.
func (sb *Sandbox) Stream(ctx context.Context, req api.ExecRequest) (*ExecStream, error) {
	resp, err := sb.c.request(ctx, http.MethodPost, sbPath(sb.ID, "exec"), nil, req, "", "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	return newExecStream(resp, req.Encoding == api.EncodingBase64), nil
}

// execCutAdvice is what to do after an exec's answer was cut.
const execCutAdvice = "the command's exit status is unknown: it may still run, or have ended; " +
	"check with 'sbx ls' and 'sbx ps NAME' before you run it again"

// Events yields the stream's stdout, stderr and final exit events. A broken
// stream or an error line ends it with an error. With the base64 encoding,
// Data holds the decoded bytes.
func (s *ExecStream) Events() iter.Seq2[api.ExecEvent, error] {
	return func(yield func(api.ExecEvent, error) bool) {
		for s.sc.Scan() {
			var ev api.ExecEvent
			if err := json.Unmarshal(s.sc.Bytes(), &ev); err != nil {
				s.err = fmt.Errorf("bad exec stream line: %w", err)
				if !s.sc.Scan() {
					// The last, unfinished line of a cut answer.
					s.err = streamCut(s.sc.Err(), execCutAdvice)
				}
				yield(api.ExecEvent{}, s.err)
				return
			}
			if s.b64 && (ev.Type == api.ExecStdout || ev.Type == api.ExecStderr) {
				b, err := base64.StdEncoding.DecodeString(ev.Data)
				if err != nil {
					s.err = fmt.Errorf("bad base64 in exec stream: %w", err)
					yield(api.ExecEvent{}, s.err)
					return
				}
				ev.Data = string(b)
			}
			switch ev.Type {
			case api.ExecStart:
				s.PID = ev.PID
			case api.ExecError:
				s.err = &Error{Code: ev.Code, Message: ev.Error}
				yield(ev, s.err)
				return
			case api.ExecExit:
				s.exit = &ev
				yield(ev, nil)
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
		s.err = streamCut(s.sc.Err(), execCutAdvice)
		yield(api.ExecEvent{}, s.err)
	}
}

// Wait copies the output to stdout and stderr (either may be nil) and
// returns the exit code.
func (s *ExecStream) Wait(stdout, stderr io.Writer) (int, error) {
	defer s.Close()
	for ev, err := range s.Events() {
		if err != nil {
			return -1, err
		}
		switch ev.Type {
		case api.ExecStdout:
			if stdout != nil {
				io.WriteString(stdout, ev.Data)
			}
		case api.ExecStderr:
			if stderr != nil {
				io.WriteString(stderr, ev.Data)
			}
		case api.ExecExit:
			return *ev.ExitCode, nil
		}
	}
	return -1, s.err
}

// Close ends the stream.
func (s *ExecStream) Close() error { return s.body.Close() }

// ExitEvent is the stream's exit line once it came (its Undo says which
// undo a guarded exec took), else nil.
func (s *ExecStream) ExitEvent() *api.ExecEvent { return s.exit }

// --- files ---

// ReadFile returns a file's contents. ErrFileNotFound if it does not exist.
func (sb *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	f, err := sb.OpenFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// File is a file of a sandbox being read.
type File struct {
	io.ReadCloser
	// Size in bytes and Mode (permission bits) of the file.
	Size int64
	Mode uint32
}

// OpenFile streams a regular file's contents; a read that ends early
// fails. A file over the server's default max_bytes (1 GiB) is
// ErrTooLarge: see OpenFileMax.
func (sb *Sandbox) OpenFile(ctx context.Context, path string) (*File, error) {
	return sb.OpenFileMax(ctx, path, 0)
}

// OpenFileMax is OpenFile of a file of at most maxBytes (0: the server's
// default, 1 GiB): a larger one is ErrTooLarge before any byte is sent. A
// FIFO, socket or device is ErrInvalidArgument. The bytes of a sparse
// file's holes are sent as zeros: Download sends them as holes.
func (sb *Sandbox) OpenFileMax(ctx context.Context, path string, maxBytes int64) (*File, error) {
	q := url.Values{"path": {path}}
	if maxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(maxBytes, 10))
	}
	resp, err := sb.c.request(ctx, http.MethodGet, sbPath(sb.ID, "files"), q, nil, "", "")
	if err != nil {
		return nil, err
	}
	mode, _ := strconv.ParseUint(resp.Header.Get("X-Sbx-Mode"), 8, 32)
	return &File{ReadCloser: resp.Body, Size: resp.ContentLength, Mode: uint32(mode)}, nil
}

// WriteFile writes r to path with mode (0 means 0644), creating parent
// directories.
func (sb *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, mode uint32) error {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	resp, err := sb.c.request(ctx, http.MethodPut, sbPath(sb.ID, "files"), q, r, "application/octet-stream", "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListFiles lists a directory.
func (sb *Sandbox) ListFiles(ctx context.Context, dir string) ([]api.FileInfo, error) {
	var out []api.FileInfo
	err := sb.c.doJSON(ctx, http.MethodGet, sbPath(sb.ID, "files"), url.Values{"path": {dir}, "list": {"1"}}, nil, &out)
	return out, err
}

// RemoveFile deletes a file, or a directory (recursive if not empty).
func (sb *Sandbox) RemoveFile(ctx context.Context, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "1")
	}
	return sb.c.doJSON(ctx, http.MethodDelete, sbPath(sb.ID, "files"), q, nil, nil)
}

// Download streams the directory (or file) at path as a tar archive (PAX;
// sparse files as GNU PAX 1.0 sparse entries, which ExtractArchive, GNU
// tar, bsdtar and Python's tarfile read). An archive estimated over the
// server's default max_bytes (1 GiB) is ErrTooLarge: see DownloadMax.
func (sb *Sandbox) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	a, err := sb.DownloadMax(ctx, path, 0)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Archive is a tar archive of a sandbox's path being read.
type Archive struct {
	io.ReadCloser
	// Type is what the path is: "dir" (the archive holds its contents),
	// "file" or "symlink" (it holds that one entry, named after it).
	Type string
}

// DownloadMax is Download of an archive of at most maxBytes (0: the
// server's default, 1 GiB), counting file data without holes and 1536
// bytes an entry: a larger one is ErrTooLarge before any byte is sent; one
// that grows past it while streaming fails with a read error.
func (sb *Sandbox) DownloadMax(ctx context.Context, path string, maxBytes int64) (*Archive, error) {
	q := url.Values{"path": {path}}
	if maxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(maxBytes, 10))
	}
	resp, err := sb.c.request(ctx, http.MethodGet, sbPath(sb.ID, "archive"), q, nil, "", "")
	if err != nil {
		return nil, err
	}
	return &Archive{ReadCloser: resp.Body, Type: resp.Header.Get("X-Sbx-Type")}, nil
}

// Upload extracts the tar archive r into the directory path.
func (sb *Sandbox) Upload(ctx context.Context, path string, r io.Reader) error {
	resp, err := sb.c.request(ctx, http.MethodPut, sbPath(sb.ID, "archive"), url.Values{"path": {path}}, r, "application/x-tar", "")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Create makes a sandbox through a client from the environment (New: $SBX_URL
// with $SBX_API_KEY, else the socket): the shape of the TypeScript and
// Python SDKs' Sandbox.create. Errors: those of New and Sandboxes.Create.
func Create(ctx context.Context, req api.CreateSandboxRequest) (*Sandbox, error) {
	c, err := New()
	if err != nil {
		return nil, err
	}
	return c.Sandboxes.Create(ctx, req)
}

// Connect finds an existing sandbox by name or id through a client from
// the environment (as Create). Errors: those of New, ErrSandboxNotFound.
func Connect(ctx context.Context, nameOrID string) (*Sandbox, error) {
	c, err := New()
	if err != nil {
		return nil, err
	}
	return c.Sandboxes.Get(ctx, nameOrID)
}
