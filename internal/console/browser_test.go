package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

// The unit tier's browser tests run the console in Debian's chromium
// against a fake of its one boundary, sbxd's REST API (below): what the
// page does with what the API answers. test/e2e/console_test.go runs it
// against a real sbxd.

const fakeKey = "k-0123456789abcdef"

// hostile is a name and label value that a page which parsed API data as
// HTML would turn into an element running script.
const hostile = `<img src=x onerror=alert(1)>`

// The fake's sandbox "web" and a deleted sandbox that had the same name.
const (
	webID    = "sbx_00000000000000aa"
	oldWebID = "sbx_00000000000000a0"
)

// previewToken is what the fake API answers as port 3000's preview_token.
const previewToken = "key_0123456789abcdef.00ff"

// fakeAPI answers the console's calls for one sandbox, "web", and records
// the requests that change something, how often each path was read, and
// the days of usage asked for.
type fakeAPI struct {
	mu      sync.Mutex
	changes []string
	gets    map[string]int
	// snapshotQueries are the queries of GET /v1/snapshots.
	snapshotQueries []string
	// usageDays counts GET /v1/usage by its since (a UTC midnight).
	usageDays map[string]int
	// held, when not nil, holds GET /v1/sandboxes/web until it is closed.
	held chan struct{}
}

func (f *fakeAPI) changed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.changes...)
}

// got is how many times path was read (GET); "" counts every path.
func (f *fakeAPI) got(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != "" {
		return f.gets[path]
	}
	n := 0
	for _, c := range f.gets {
		n += c
	}
	return n
}

// asked is how often GET /v1/usage asked for each UTC day ("2006-01-02").
func (f *fakeAPI) asked() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.usageDays)
}

// queries are the queries GET /v1/snapshots was asked with.
func (f *fakeAPI) queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.snapshotQueries...)
}

// hold makes GET /v1/sandboxes/web wait until the returned func is called.
func (f *fakeAPI) hold() (release func()) {
	c := make(chan struct{})
	f.mu.Lock()
	f.held = c
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.held = nil
		f.mu.Unlock()
		close(c)
	}
}

// fakeUsage is what the fake API recorded per sandbox id and UTC day
// (days before today): the console's sandbox "web", a deleted sandbox of
// the same name, and another sandbox. The costs are the fake's own (the
// console sums them, it does not price).
var fakeUsage = map[string]map[int]map[string]any{
	webID: {
		0: {"cpu_seconds": 90, "memory_gib_seconds": 460.8, "stored_byte_seconds": 0, "cost": 0.0125},
		3: {"cpu_seconds": 30, "memory_gib_seconds": 100, "stored_byte_seconds": 7.2e12, "cost": 0.00004},
	},
	oldWebID: {
		0: {"cpu_seconds": 5000, "memory_gib_seconds": 9000, "stored_byte_seconds": 0, "cost": 1.5},
		3: {"cpu_seconds": 5000, "memory_gib_seconds": 9000, "stored_byte_seconds": 0, "cost": 1.5},
	},
	"sbx_00000000000000bb": {
		0: {"cpu_seconds": 7000, "memory_gib_seconds": 7000, "stored_byte_seconds": 0, "cost": 2},
		1: {"cpu_seconds": 7000, "memory_gib_seconds": 7000, "stored_byte_seconds": 0, "cost": 2},
		5: {"cpu_seconds": 7000, "memory_gib_seconds": 7000, "stored_byte_seconds": 0, "cost": 2},
	},
}

// usage answers GET /v1/usage?group_by=sandbox for one whole UTC day
// (what the console asks) from fakeUsage; anything else is 400, as sbxd
// would answer a malformed window (or the fake cannot).
func (f *fakeAPI) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err1 := time.Parse(time.RFC3339Nano, q.Get("since"))
	until, err2 := time.Parse(time.RFC3339Nano, q.Get("until"))
	if q.Get("group_by") != "sandbox" || err1 != nil || err2 != nil || !since.Equal(since.Truncate(24*time.Hour)) || until.Sub(since) != 24*time.Hour {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		fmt.Fprintf(w, `{"error":{"code":"invalid_argument","message":"the fake answers one UTC day grouped by sandbox, not %q"}}`, r.URL.RawQuery)
		return
	}
	f.mu.Lock()
	f.usageDays[since.UTC().Format(time.DateOnly)]++
	f.mu.Unlock()
	ago := int(time.Now().UTC().Truncate(24*time.Hour).Sub(since) / (24 * time.Hour))
	entries := []map[string]any{}
	for _, id := range []string{oldWebID, webID, "sbx_00000000000000bb"} {
		if u, ok := fakeUsage[id][ago]; ok {
			e := map[string]any{"sandbox": "web", "sandbox_id": id}
			if id == "sbx_00000000000000bb" {
				e["sandbox"] = "other"
			}
			for k, v := range u {
				e[k] = v
			}
			entries = append(entries, e)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"since": since, "until": until, "group_by": "sandbox",
		"prices": map[string]float64{"cpu_hour": 0.025, "memory_gib_hour": 0.0075, "storage_gb_month": 0.08},
		"usage":  entries, "total": map[string]any{"cpu_seconds": 0, "memory_gib_seconds": 0, "stored_byte_seconds": 0, "cost": 0}})
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if r.Header.Get("Upgrade") != "" {
		for _, p := range strings.Split(r.Header.Get("Sec-WebSocket-Protocol"), ",") {
			if enc, ok := strings.CutPrefix(strings.TrimSpace(p), "bearer."); ok {
				b, _ := base64.RawURLEncoding.DecodeString(enc)
				key = string(b)
			}
		}
	}
	if key != fakeKey {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"missing or wrong API key"}}`)
		return
	}
	f.mu.Lock()
	if r.Method != "GET" {
		f.changes = append(f.changes, r.Method+" "+r.URL.Path)
	} else {
		f.gets[r.URL.Path]++
	}
	held := f.held
	f.mu.Unlock()
	if held != nil && r.Method == "GET" && r.URL.Path == "/v1/sandboxes/web" {
		select {
		case <-held:
		case <-r.Context().Done():
			return
		}
	}
	sb := map[string]any{"id": webID, "name": "web", "state": "running", "image": "default", "cpus": 1, "memory_mb": 512, "disk_mb": 2048,
		"labels":      map[string]string{"agent": hostile, "ansi": "\x1b[31mred\x1b[0m", "rtl": "a\u202eb"},
		"create_time": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "source": nil,
		"network": map[string]any{"internet": true, "allow": []string{}, "deny": []string{"evil.example.org"}, "connect": []string{}}}
	cp := func(id, comment string, min int) map[string]any {
		return map[string]any{"id": id, "comment": comment, "create_time": time.Now().Add(-time.Duration(min) * time.Minute).UTC().Format(time.RFC3339),
			"source_id": nil, "health": "ok", "size_bytes": 4096, "files": 3, "added_bytes": 1200}
	}
	answer := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /v1/sandboxes":
		answer([]any{sb})
	case "GET /v1/sandboxes/web":
		answer(sb)
	case "GET /v1/sandboxes/web/checkpoints":
		answer([]any{cp("v2", "agent broke it", 5), cp("v1", "deps installed", 30), cp("v0", "", 60)})
	case "GET /v1/snapshots":
		// Filtered by ?sandbox= (name or id) as sbxd does; the deleted
		// sandbox that was also named web left one.
		f.mu.Lock()
		f.snapshotQueries = append(f.snapshotQueries, r.URL.RawQuery)
		f.mu.Unlock()
		sn := func(id, name, of string, min int) map[string]any {
			return map[string]any{"id": id, "name": name, "sandbox": "web", "sandbox_id": of, "create_time": time.Now().Add(-time.Duration(min) * time.Minute).UTC().Format(time.RFC3339),
				"expire_time": nil, "memory_bytes": 1 << 26, "disk_bytes": 1 << 20, "stored_bytes": 1 << 22, "health": "ok"}
		}
		out := []any{}
		for _, s := range []map[string]any{sn("snp_1", "before-migration", webID, 20), sn("snp_0", "of-the-deleted-web", oldWebID, 50)} {
			if want := r.URL.Query().Get("sandbox"); want == "" || want == s["sandbox"] || want == s["sandbox_id"] {
				delete(s, "sandbox_id") // not in the API's answer
				out = append(out, s)
			}
		}
		answer(out)
	case "GET /v1/sandboxes/web/checkpoints/v2/diff":
		answer(map[string]any{"from": r.URL.Query().Get("from"), "to": "v2",
			"added":    []any{map[string]any{"path": "/workspace/" + hostile + ".txt", "type": "file", "size": 2, "old_size": 0}},
			"modified": []any{map[string]any{"path": "/workspace/config.txt", "type": "file", "size": 4, "old_size": 4}},
			"deleted":  []any{map[string]any{"path": "/workspace/README", "type": "file", "size": 0, "old_size": 5}}})
	case "POST /v1/sandboxes/web/checkpoints/v1/restore":
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"info","data":"stopping the sandbox"}`)
		b, _ := json.Marshal(map[string]any{"type": "complete", "data": map[string]any{"name": "web", "state": "stopped"}})
		fmt.Fprintf(w, "%s\n", b)
	case "GET /v1/sandboxes/web/processes":
		answer([]any{map[string]any{"pid": 7, "cmd": []string{"sh", "-c", "printf '\\033[31m<b>x</b>'"}, "start_time": time.Now().UTC().Format(time.RFC3339), "state": "running", "output_bytes": 20}})
	case "GET /v1/sandboxes/web/processes/7/output":
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintln(w, `{"type":"stdout","data":"\u001b[31m<b>bold</b>\u001b[0m\n"}`)
		fmt.Fprintln(w, `{"type":"exit","exit_code":0}`)
	case "GET /v1/sandboxes/web/network":
		answer(sb["network"])
	case "GET /v1/sandboxes/web/network/log":
		answer(map[string]any{"counts": map[string]int{"dns_answered": 3, "dns_refused": 1}, "refused": []any{
			map[string]any{"time": time.Now().UTC().Format(time.RFC3339), "kind": "dns", "destination": "evil.example.org", "reason": "denied by rule", "count": 1}}})
	case "GET /v1/sandboxes/web/ports":
		answer([]any{map[string]any{"port": 3000, "address": "0.0.0.0", "pid": 9, "command": "node", "preview_token": previewToken}})
	case "GET /v1/usage":
		f.usage(w, r)
	case "GET /v1/sandboxes/web/exec":
		f.terminal(w, r)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		fmt.Fprintf(w, `{"error":{"code":"not_found","message":"no route %s %s"}}`, r.Method, r.URL.Path)
	}
}

// terminal is a shell that knows one command: "echo hi" prints hi.
func (f *fakeAPI) terminal(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"sbx.tty"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"start","pid":42}`))
	_ = c.Write(ctx, websocket.MessageBinary, []byte("$ "))
	var line []byte
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageBinary {
			continue
		}
		for _, ch := range b {
			if ch != '\r' {
				line = append(line, ch)
				_ = c.Write(ctx, websocket.MessageBinary, []byte{ch})
				continue
			}
			out := "\r\n"
			if string(line) == "echo hi" {
				out += "hi\r\n"
			}
			line = line[:0]
			_ = c.Write(ctx, websocket.MessageBinary, []byte(out+"$ "))
		}
	}
}

// startBrowser starts headless chromium, or skips (fails with CI=true)
// where there is none; the problems it returns are the page's dialogs (an
// injected script's alert) and uncaught exceptions.
func startBrowser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	exe, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (scripts/install.sh --test-deps installs it)")
		}
		t.Skip("chromium is not installed")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 860))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	// A query that never matches (a lost click) fails the test at this
	// bound instead of hanging it.
	ctx, cancelT := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	var mu sync.Mutex
	var problems []string
	note := func(s string) { mu.Lock(); problems = append(problems, s); mu.Unlock() }
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			note("dialog: " + ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	exceptions := chromedp.Events(ctx, cdpruntime.ExceptionThrown)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			if d.Exception != nil {
				d.Text += " " + d.Exception.Description
			}
			note(fmt.Sprintf("uncaught at %s:%d: %s", d.URL, d.LineNumber, d.Text))
		}
	}()
	return ctx, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), problems...) }
}

// typeText types s on the focused element as a keyboard would: one keyDown
// (with its text) and one keyUp a character, "\r" as the Enter key.
// (chromedp's SendKeys adds a "char" event to each keyDown, which a
// terminal reads as a second keypress.)
func typeText(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range s {
			down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: string(r), Key: string(r)}
			if r == '\r' {
				down.Key, down.Code, down.WindowsVirtualKeyCode = "Enter", "Enter", 13
			}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, down); err != nil {
				return err
			}
			up := down
			up.Type, up.Text = input.DispatchKeyEventTypeKeyUp, ""
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, up); err != nil {
				return err
			}
		}
		return nil
	})
}

func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))
}

func hasText(sel, want string) chromedp.Action[chromedp.Void] {
	return until(fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").includes(%q)`, sel, want))
}

// waitFor waits until ok, or fails the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// TestBrowserAgainstFakeAPI: in a real browser, the console signs in (a
// wrong key shows nothing and is not kept), lists the sandbox, shows
// labels, file names and output holding HTML, ANSI and bidi controls as
// text (no element, no script, escapes visible), reads a step's diff,
// restores only after the dialog's Confirm (Cancel does nothing), and
// types in the terminal, whose WebSocket carries the key as a subprotocol,
// never in the URL.
func TestBrowserAgainstFakeAPI(t *testing.T) {
	api := &fakeAPI{gets: map[string]int{}, usageDays: map[string]int{}}
	var urls []string
	var mu sync.Mutex
	console := Handler(Config{PreviewDomain: "localhost"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		urls = append(urls, r.URL.String())
		mu.Unlock()
		if Serves(r.URL.Path) {
			console.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, problems := startBrowser(t)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), "wrong-key-0123456789"),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		hasText("#signin-error", "unauthorized"),
	); err != nil {
		t.Fatalf("wrong key: %v", err)
	}
	if n := js[int](t, ctx, `document.querySelectorAll("tr[data-sandbox]").length + (sessionStorage.getItem("sbx.key") === null ? 0 : 100)`); n != 0 {
		t.Fatalf("a wrong key showed %d rows (+100: the key was kept)", n)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#key"), fakeKey),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-sandbox="web"]`)),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	row := js[string](t, ctx, `document.querySelector('tr[data-sandbox="web"]').textContent`)
	for _, want := range []string{"agent=" + hostile, `ansi=\x1b[31mred\x1b[0m`, `rtl=a\u202eb`} {
		if !strings.Contains(row, want) {
			t.Errorf("the sandbox row %q does not show %q", row, want)
		}
	}

	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-sandbox="web"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`li[data-step="v2"]`)),
		hasText("#timeline", "before-migration"),
		chromedp.Click(chromedp.CSS(`li[data-step="v2"] button[data-action="diff"]`)),
		hasText(`div[data-diff="v2"]`, "v1 → v2: 1 added, 1 modified, 1 deleted"),
	); err != nil {
		t.Fatalf("timeline: %v", err)
	}
	if d := js[string](t, ctx, `document.querySelector('div[data-diff="v2"]').textContent`); !strings.Contains(d, "/workspace/"+hostile+".txt") {
		t.Errorf("the diff shows %q, not the file name as text", d)
	}
	// The timeline asks sbxd for this sandbox's snapshots (by id: the
	// deleted sandbox that was also named web is not this one).
	if q := api.queries(); len(q) == 0 || slices.ContainsFunc(q, func(q string) bool { return q != "sandbox="+webID }) {
		t.Errorf("GET /v1/snapshots asked with %q, want only sandbox=%s", q, webID)
	}
	if tl := js[string](t, ctx, `document.getElementById("timeline").textContent`); strings.Contains(tl, "of-the-deleted-web") {
		t.Errorf("the timeline shows a snapshot of another sandbox: %q", tl)
	}

	// Cancel restores nothing; Confirm restores. (The button is pressed
	// until the dialog is open: a poll may redraw the row under a click.)
	restore := until(`document.getElementById("confirm").open || (document.querySelector('li[data-step="v1"] button[data-action="restore"]')?.click(), false)`)
	if err := chromedp.Do(ctx, restore, chromedp.Click(chromedp.CSS("#confirm-cancel")),
		until(`!document.getElementById("confirm").open`)); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if c := api.changed(); len(c) != 0 {
		t.Fatalf("Cancel changed something: %q", c)
	}
	if err := chromedp.Do(ctx, restore, chromedp.Click(chromedp.CSS("#confirm-ok")),
		hasText("#status", "restored to v1")); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if c := api.changed(); len(c) != 1 || c[0] != "POST /v1/sandboxes/web/checkpoints/v1/restore" {
		t.Fatalf("Confirm sent %q", c)
	}

	// Polling: one read of the sandbox a poll (the timeline's poll reads it
	// and its checkpoints), a poll does not start while one is under way,
	// and none while the browser tab is hidden.
	const sbPath, cpPath = "/v1/sandboxes/web", "/v1/sandboxes/web/checkpoints"
	sb0, cp0 := api.got(sbPath), api.got(cpPath)
	waitFor(t, ctx, "three polls of the timeline", func() bool { return api.got(cpPath) >= cp0+3 })
	// A poll under way may have read the sandbox and not yet its checkpoints.
	if s, c := api.got(sbPath)-sb0, api.got(cpPath)-cp0; s > c+1 {
		t.Errorf("%d polls of the timeline read the sandbox %d times, want once a poll", c, s)
	}
	release := api.hold()
	sb1 := api.got(sbPath)
	waitFor(t, ctx, "a poll reads the held sandbox", func() bool { return api.got(sbPath) > sb1 })
	time.Sleep(5 * time.Second) // 2.5 poll periods: a poll on a timer would start twice meanwhile
	if n := api.got(sbPath) - sb1; n != 1 {
		t.Errorf("while a poll waited for sbxd, %d polls read the sandbox, want only that one", n)
	}
	release()
	cp1 := api.got(cpPath)
	waitFor(t, ctx, "the held poll ends and the next starts", func() bool { return api.got(cpPath) > cp1+1 })
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`Object.defineProperty(document, "hidden", {configurable: true, get: () => true}), document.dispatchEvent(new Event("visibilitychange")), true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, hasText("#live", "paused")); err != nil {
		t.Fatalf("hidden tab: %v", err)
	}
	all := api.got("")
	time.Sleep(5 * time.Second)
	if n := api.got("") - all; n != 0 {
		t.Errorf("the hidden tab made %d requests", n)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`delete document.hidden, document.dispatchEvent(new Event("visibilitychange")), true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, hasText("#live", "live ·")); err != nil {
		t.Fatalf("shown again: %v", err)
	}
	if api.got("") == all {
		t.Error("the tab shown again did not poll")
	}

	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/sandboxes/web/processes"),
		chromedp.WaitVisible(chromedp.CSS("#processes table")),
		chromedp.Click(chromedp.CSS("#processes td button")),
		hasText("#output pre", "exited with code 0"),
	); err != nil {
		t.Fatalf("processes: %v", err)
	}
	if out := js[string](t, ctx, `document.querySelector("#output pre").textContent`); !strings.Contains(out, `\x1b[31m<b>bold</b>\x1b[0m`) {
		t.Errorf("output shown as %q", out)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/sandboxes/web/ports"),
		chromedp.WaitVisible(chromedp.CSS("#ports a")),
	); err != nil {
		t.Fatalf("ports: %v", err)
	}
	// The preview link: host-based, with the token sbxd answered for the
	// port (minted for the signed-in key), never the key.
	if href := js[string](t, ctx, `document.querySelector("#ports a").href`); !strings.HasPrefix(href, "http://3000-web.localhost:") ||
		!strings.HasSuffix(href, "/?sbx_preview="+previewToken) {
		t.Errorf("preview link %q, want the host-based preview with sbxd's token %s", href, previewToken)
	}

	rows := `Array.from(document.querySelectorAll("#terminal .xterm-rows > div")).map(d => d.textContent.replace(/\u00a0/g, " ").trimEnd())`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/sandboxes/web/terminal"),
		hasText("#term-status", "connected: pid 42"),
		chromedp.Focus(chromedp.CSS("#terminal .xterm-helper-textarea")),
		typeText("echo hi\r"),
		until(rows+`.includes("hi")`),
	); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](rows))
		t.Fatalf("terminal: %v; rows %q", err, got)
	}

	// Usage: web's own (by id, not the deleted web's nor other's) per UTC
	// day over 14 days, and its totals.
	day0 := time.Now().UTC().Format(time.DateOnly)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/sandboxes/web/usage"),
		chromedp.WaitVisible(chromedp.CSS("#usage-total")),
	); err != nil {
		t.Fatalf("usage: %v", err)
	}
	for measure, want := range map[string]string{"cost": "$0.0125", "cpu": "120.0 s", "memory": "560.8 GiB·s", "stored": "2.00 GB·h"} {
		if got := js[string](t, ctx, fmt.Sprintf(`document.querySelector('#usage-total [data-total=%q]').textContent`, measure)); got != want {
			t.Errorf("total %s shown as %q, want %q", measure, got, want)
		}
	}
	type bar struct {
		Day   string
		Value float64
	}
	bars := func(measure string) []bar {
		return js[[]bar](t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll('figure[data-measure=%q] .bar')).map(b => ({Day: b.dataset.day, Value: Number(b.dataset.value)}))`, measure))
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for measure, of := range map[string]string{"cost": "cost", "cpu": "cpu_seconds", "memory": "memory_gib_seconds"} {
		var want []bar
		for ago := 13; ago >= 0; ago-- {
			v := 0.0
			if u, ok := fakeUsage[webID][ago]; ok {
				v, _ = strconv.ParseFloat(fmt.Sprint(u[of]), 64)
			}
			want = append(want, bar{today.AddDate(0, 0, -ago).Format(time.DateOnly), v})
		}
		if got := bars(measure); !slices.Equal(got, want) {
			t.Errorf("%s bars %v, want %v", measure, got, want)
		}
	}
	// A cost below a hundredth of a cent still shows.
	threeAgo := today.AddDate(0, 0, -3).Format(time.DateOnly)
	if row := js[string](t, ctx, fmt.Sprintf(`Array.from(document.querySelectorAll("table.usage-days tr")).find(r => r.cells[0].textContent === %q)?.textContent ?? ""`, threeAgo)); !strings.Contains(row, "$0.000040") {
		t.Errorf("the numbers of %s: %q, want the cost $0.000040", threeAgo, row)
	}
	// A day that is over is asked for once; today at every poll.
	n := api.asked()[day0]
	waitFor(t, ctx, "another poll of the usage tab", func() bool { return api.asked()[day0] > n })
	if asked := api.asked(); time.Now().UTC().Format(time.DateOnly) == day0 && time.Now().UTC().Hour() > 0 {
		for ago := 1; ago < 14; ago++ {
			if d := today.AddDate(0, 0, -ago).Format(time.DateOnly); asked[d] != 1 {
				t.Errorf("GET /v1/usage asked for %s %d times, want once", d, asked[d])
			}
		}
	}
	if n := js[int](t, ctx, `document.querySelectorAll("#app img, #app b, #app script").length`); n != 0 {
		t.Errorf("%d elements made from API data", n)
	}
	mu.Lock()
	for _, u := range urls {
		if strings.Contains(u, fakeKey) || strings.Contains(u, base64.RawURLEncoding.EncodeToString([]byte(fakeKey))) {
			t.Errorf("the key is in a URL: %s", u)
		}
	}
	mu.Unlock()
	if p := problems(); len(p) > 0 {
		t.Errorf("the page raised: %q", p)
	}
}
