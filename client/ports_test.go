package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/sbxhq/sbx/api"
)

func TestPorts(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/sandboxes/sbx_1/ports":
			fmt.Fprint(w, `[{"port":3000,"address":"0.0.0.0","pid":12,"command":"python3"},{"port":5173,"address":"::1"}]`)
		default:
			w.WriteHeader(409)
			fmt.Fprint(w, `{"error":{"code":"conflict","message":"sandbox \"web\" is stopped: cannot list its ports"}}`)
		}
	})
	sb := &Sandbox{Sandbox: api.Sandbox{ID: "sbx_1", Name: "web"}, c: c}
	ports, err := sb.Ports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Port{{Port: 3000, Address: "0.0.0.0", PID: 12, Command: "python3"}, {Port: 5173, Address: "::1"}}
	if fmt.Sprint(ports) != fmt.Sprint(want) {
		t.Fatalf("%+v", ports)
	}
	sb.ID = "sbx_2"
	if _, err := sb.Ports(context.Background()); !errors.Is(err, ErrConflict) {
		t.Fatalf("%v", err)
	}
}

func TestPortURL(t *testing.T) {
	c, err := New(WithURL("http://127.0.0.1:7070/base/?x=1"))
	if err != nil {
		t.Fatal(err)
	}
	sb := &Sandbox{Sandbox: api.Sandbox{ID: "sbx_1", Name: "web"}, c: c}
	if got := sb.PortURL(3000); got != "http://127.0.0.1:7070/base/v1/sandboxes/web/ports/3000/" {
		t.Fatalf("%q", got)
	}
	sock, err := New(WithSocket("/run/sbx/sbx.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if got := (&Sandbox{Sandbox: api.Sandbox{Name: "web"}, c: sock}).PortURL(3000); got != "" {
		t.Fatalf("a socket client's URL: %q", got)
	}
}

func TestPortUnreachableIs(t *testing.T) {
	c := fakeSBXD(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		fmt.Fprint(w, `{"error":{"code":"port_unreachable","message":"nothing listens on port 3000 in sandbox web"}}`)
	})
	sb := &Sandbox{Sandbox: api.Sandbox{ID: "sbx_1"}, c: c}
	if _, err := sb.Ports(context.Background()); !errors.Is(err, ErrPortUnreachable) {
		t.Fatalf("%v", err)
	}
}
