package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
