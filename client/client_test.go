package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sbxhq/sbx/api"
)

func fakeSBXD(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(WithURL(srv.URL), WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestErrorsCompareByCode(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("no bearer key sent")
		}
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"code":"sandbox_not_found","message":"no sandbox named \"x\""}}`)
	})
	_, err := c.Sandboxes.Get(context.Background(), "x")
	if !errors.Is(err, ErrSandboxNotFound) || !errors.Is(err, ErrNotFound) || errors.Is(err, ErrImageNotFound) {
		t.Fatalf("errors.Is does not follow the code: %v", err)
	}
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Message != `no sandbox named "x"` {
		t.Fatalf("%+v", ae)
	}
}

func TestNonJSONErrorKeepsStatus(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	})
	_, err := c.Sandboxes.Get(context.Background(), "x")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 405 || ae.Code != api.CodeInternal {
		t.Fatalf("%v", err)
	}
}

func TestLongOperationStream(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"info","data":"step 1","time":"2026-01-01T00:00:00Z"}`)
		fmt.Fprintln(w, `{"type":"info","data":"step 2","time":"2026-01-01T00:00:01Z"}`)
		if r.URL.Query().Get("name") == "bad" {
			fmt.Fprintln(w, `{"type":"error","error":"no space left","code":"checkpoint_failed","time":"2026-01-01T00:00:02Z"}`)
			return
		}
		fmt.Fprintln(w, `{"type":"complete","data":{"name":"img","digest":"sha256:00"},"time":"2026-01-01T00:00:02Z"}`)
	})
	var lines []string
	img, err := c.Images.Import(context.Background(), "img", nil, func(m string, _ timeT) { lines = append(lines, m) })
	if err != nil || img.Name != "img" || len(lines) != 2 {
		t.Fatalf("%+v %v %v", img, err, lines)
	}
	_, err = c.Images.Import(context.Background(), "bad", nil, nil)
	if !errors.Is(err, ErrCheckpointFailed) {
		t.Fatalf("error line: %v", err)
	}
}

func TestStreamWithoutEnd(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"type":"stdout","data":"partial"}`)
	})
	sb := &Sandbox{c: c, Sandbox: api.Sandbox{ID: "sbx_1"}}
	st, err := sb.Stream(context.Background(), api.ExecRequest{Cmd: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Wait(nil, nil); err == nil {
		t.Fatal("a stream cut before its exit line reads as success")
	}
}

func TestBadURL(t *testing.T) {
	if _, err := New(WithURL("ftp://x")); err == nil {
		t.Fatal("accepted ftp://")
	}
}

type timeT = time.Time

// hijackAfter answers with line (an NDJSON progress line) then drops the
// connection without ending the chunked body, as a kill -9 of sbxd does.
func hijackAfter(t *testing.T, line string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, line)
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
	}
}

func TestStreamCutBySBXDDeath(t *testing.T) {
	c := fakeSBXD(t, hijackAfter(t, `{"type":"info","data":"pausing","time":"2026-01-01T00:00:00Z"}`))
	sb := &Sandbox{c: c, Sandbox: api.Sandbox{ID: "sbx_1", Name: "dev"}}
	var lines []string
	_, err := sb.CheckpointStream(context.Background(), "", func(m string, _ time.Time) { lines = append(lines, m) })
	if len(lines) != 1 {
		t.Fatalf("progress lines %v", lines)
	}
	var ae *Error
	if !errors.As(err, &ae) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a stream cut by sbxd's death is %v, want an unavailable *Error", err)
	}
	for _, want := range []string{"sbxd went away in the middle of the operation", "finished or is rolled back", "sbx checkpoints NAME"} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("message %q lacks %q", ae.Message, want)
		}
	}
}

// TestStreamCutMidLine: sbxd killed in the middle of writing a line: the
// unfinished line is the cut, not a bad line.
func TestStreamCutMidLine(t *testing.T) {
	c := fakeSBXD(t, hijackAfter(t, `{"type":"info","data":"pausing","time":"2026-01-01T00:00:00Z"}`+"\n"+`{"type":"info","da`))
	sb := &Sandbox{c: c, Sandbox: api.Sandbox{ID: "sbx_1", Name: "dev"}}
	if _, err := sb.CheckpointStream(context.Background(), "", nil); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "sbxd went away") {
		t.Fatalf("a checkpoint cut mid-line: %v, want unavailable", err)
	}
	c = fakeSBXD(t, hijackAfter(t, `{"type":"stdout","da`))
	sb = &Sandbox{c: c, Sandbox: api.Sandbox{ID: "sbx_1"}}
	st, err := sb.Stream(context.Background(), api.ExecRequest{Cmd: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Wait(nil, nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an exec cut mid-line: %v, want unavailable", err)
	}
}

func TestExecStreamCutBySBXDDeath(t *testing.T) {
	c := fakeSBXD(t, hijackAfter(t, `{"type":"stdout","data":"partial"}`))
	sb := &Sandbox{c: c, Sandbox: api.Sandbox{ID: "sbx_1"}}
	st, err := sb.Stream(context.Background(), api.ExecRequest{Cmd: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Wait(nil, nil)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "sbxd went away") || !strings.Contains(err.Error(), "sbx ps NAME") {
		t.Fatalf("an exec stream cut by sbxd's death is %v, want unavailable with advice", err)
	}
}
