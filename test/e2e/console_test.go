package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

// screenshotDir is where TestConsoleBrowser saves a screenshot of each
// console page; docs/console.md shows them.
const screenshotDir = "../../docs/console"

// browser starts a headless Debian chromium driven by chromedp and returns
// its context; alerts (an injected script would raise one) and uncaught
// exceptions of the page are what the returned func reports.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	exe := need(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root, in CI
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 8*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	var mu sync.Mutex
	var problems []string
	note := func(s string) {
		mu.Lock()
		problems = append(problems, s)
		mu.Unlock()
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			note("a dialog opened: " + ev.Message)
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
			desc := d.Text
			if d.Exception != nil {
				desc += " " + d.Exception.Description
			}
			note(fmt.Sprintf("uncaught at %s:%d: %s", d.URL, d.LineNumber, desc))
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

// shoot saves the page as docs/console/<name>.png.
func shoot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		b, err := chromedp.CaptureScreenshot()(ctx, t)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(screenshotDir, name+".png"), b, 0o644)
	})
}

// waitText waits until the text of the first element matching sel
// contains want.
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").includes(%q)`, sel, want))
}

// poll waits until the JavaScript expression is true.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(3*time.Minute), chromedp.WithPollingInterval(100*time.Millisecond))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](ctx context.Context, expr string) (T, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// TestConsoleBrowser is issue 18's browser test: a person signs in to the
// console in a real browser (Debian's chromium, headless), sees the
// sandbox the test made, opens its timeline and a step's diff, restores a
// checkpoint with the button and sees the change, runs `echo hi` in the
// terminal and reads hi back. It saves a screenshot of each page into
// docs/console. Along the way: a wrong key shows nothing, and names,
// labels and output holding HTML or ANSI show as text.
func TestConsoleBrowser(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>`
	sb := newSandbox(t, api.CreateSandboxRequest{Name: "web-" + randomHex(3),
		Labels: map[string]string{"agent": "claude", "task": "fix-tests"}})
	name := sb.Sandbox.Name
	mustSh(t, sb, "mkdir -p /workspace/app && echo one > /workspace/app/config.txt && echo keep > /workspace/app/README")
	if _, err := sb.Checkpoint(ctxT(t), "deps installed"); err != nil {
		t.Fatal(err)
	}
	mustSh(t, sb, "echo two > /workspace/app/config.txt && rm /workspace/app/README && echo x > '/workspace/app/"+evil+".txt'")
	if _, err := sb.Checkpoint(ctxT(t), "agent broke it"); err != nil {
		t.Fatal(err)
	}

	ctx, problems := browser(t)
	base := "http://" + h.listen + "/"
	sbRow := fmt.Sprintf(`tr[data-sandbox=%q]`, name)

	// A wrong key: refused, nothing shown.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		shoot("signin"),
		chromedp.SendKeys(chromedp.CSS("#key"), "not-the-key-0123456789"),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		waitText("#signin-error", "unauthorized"),
	); err != nil {
		t.Fatalf("sign in with a wrong key: %v", err)
	}
	shown, err := eval[int](ctx, `document.querySelectorAll("tr[data-sandbox]").length + (sessionStorage.getItem("sbx.key") === null ? 0 : 100)`)
	if err != nil || shown != 0 {
		t.Fatalf("after a wrong key: %d sandbox rows shown (+100 if the key was kept), %v", shown, err)
	}

	// The key: the sandboxes.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#key"), h.apiKey),
		chromedp.Click(chromedp.CSS(`#signin button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(sbRow)),
		waitText(sbRow, "task=fix-tests"),
		shoot("sandboxes"),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	if inURL, err := eval[bool](ctx, fmt.Sprintf(`location.href.includes(%q) || document.cookie.includes(%q)`, h.apiKey, h.apiKey)); err != nil || inURL {
		t.Fatalf("the key is in the URL or a cookie: %v %v", inURL, err)
	}

	// The timeline, v2's diff: what the agent changed, the hostile file
	// name as text.
	v2 := `li[data-step="v2"]`
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(sbRow+" a")),
		chromedp.WaitVisible(chromedp.CSS(v2)),
		waitText(v2, "agent broke it"),
		chromedp.Click(chromedp.CSS(v2+` button[data-action="diff"]`)),
		chromedp.WaitVisible(chromedp.CSS(`div[data-diff="v2"] table`)),
		waitText(`div[data-diff="v2"]`, "v1 → v2: "),
		shoot("timeline"),
	); err != nil {
		t.Fatalf("timeline and diff: %v", err)
	}
	diff, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`div[data-diff="v2"]`)))
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := eval[int](ctx, `document.querySelectorAll("#app img").length`)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/workspace/app/" + evil + ".txt", "/workspace/app/config.txt", "/workspace/app/README"} {
		if !strings.Contains(diff, want) {
			t.Errorf("v2's diff does not show %q:\n%s", want, diff)
		}
	}
	if imgs != 0 {
		t.Errorf("a file name became %d img elements", imgs)
	}

	// Restore v1 with its button, confirmed in the dialog: the change is
	// undone, and the disk now differs from v2 by the inverse of v2's diff.
	v1 := `li[data-step="v1"]`
	if err := chromedp.Do(ctx,
		// Pressed until the dialog is open: a poll may redraw the row
		// under a click.
		poll(`document.getElementById("confirm").open || (document.querySelector('`+v1+` button[data-action="restore"]')?.click(), false)`),
		waitText("#confirm-text", "Restore "+name+" to v1"),
		shoot("restore-confirm"),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
		waitText("#status", "restored to v1"),
		waitText("#sandbox-head", "stopped"),
		chromedp.Click(chromedp.CSS(`li[data-step="live"] button[data-action="diff"]`)),
		waitText(`div[data-diff="live"]`, "v2 → live: "),
		waitText(`div[data-diff="live"]`, "/workspace/app/README"),
		waitText(`div[data-diff="live"]`, "/workspace/app/"+evil+".txt"),
		shoot("restored"),
	); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := strings.TrimSpace(mustSh(t, sb, "cat /workspace/app/config.txt; ls /workspace/app")); got != "one\nREADME\nconfig.txt" {
		t.Fatalf("after the console's restore to v1 the sandbox has %q", got)
	}

	// The terminal: echo hi, read hi back (a row that is only "hi", not
	// the typed command).
	rows := `Array.from(document.querySelectorAll("#terminal .xterm-rows > div")).map(d => d.textContent.replace(/\u00a0/g, " ").trimEnd())`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"#/sandboxes/"+name+"/terminal"),
		waitText("#term-status", "connected"),
		chromedp.WaitReady(chromedp.CSS("#terminal .xterm-helper-textarea")),
		chromedp.Focus(chromedp.CSS("#terminal .xterm-helper-textarea")),
		typeText("cat /workspace/app/config.txt; echo hi\r"),
		poll(rows+`.includes("hi")`),
		shoot("terminal"),
	); err != nil {
		got, _ := eval[[]string](ctx, rows)
		t.Fatalf("terminal: %v; rows: %q", err, got)
	}
	if got, err := eval[[]string](ctx, rows); err != nil || !contains(got, "one") {
		t.Errorf("the terminal shows %q, want the restored config.txt (one)", got)
	}

	// Processes: output with ANSI and HTML shows as text.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"#/sandboxes/"+name+"/processes"),
		chromedp.WaitVisible(chromedp.CSS("#processes table")),
	); err != nil {
		t.Fatalf("processes: %v", err)
	}
	pid, err := sb.Start(ctxT(t), api.ExecRequest{Cmd: []string{"sh", "-c", `printf '\033[31m<b>red</b>\033[0m\n'; sleep 600`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		waitText("#processes", fmt.Sprint(pid)),
		chromedp.Click(chromedp.Search(fmt.Sprintf(`//tr[td[1][normalize-space()="%d"]]//button`, pid))),
		waitText("#output pre", "red"),
		shoot("processes"),
	); err != nil {
		t.Fatalf("process output: %v", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#output pre")))
	if err != nil {
		t.Fatal(err)
	}
	bold, err := eval[int](ctx, `document.querySelectorAll("#app b").length`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `\x1b[31m<b>red</b>\x1b[0m`) || bold != 0 {
		t.Errorf("process output shown as %q with %d <b> elements; want the escape and the tags as text", out, bold)
	}

	// Network rules and the refused connections, ports, usage.
	if _, err := sb.Network().Set(ctxT(t), api.NetworkRules{Internet: true, Deny: []string{"blocked.test"}}); err != nil {
		t.Fatal(err)
	}
	_ = sh(t, sb, "getent hosts blocked.test; true")
	for _, tab := range []struct{ name, sel, want string }{
		{"network", "#rules", "blocked.test"},
		{"ports", "#ports", ""},
		{"usage", "#usage-total", "cost"},
	} {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(base+"#/sandboxes/"+name+"/"+tab.name),
			chromedp.WaitVisible(chromedp.CSS(tab.sel)),
			waitText(tab.sel, tab.want),
			shoot(tab.name),
		); err != nil {
			t.Fatalf("%s: %v", tab.name, err)
		}
	}
	// The usage plot: today's bars show what the sandbox used (its runs
	// were read when the restore stopped it, and every usage_interval), no
	// more than sbxd answers a moment later; the 13 days before it did not
	// exist.
	day0 := time.Now().UTC().Truncate(24 * time.Hour)
	today := func(measure string) string {
		return fmt.Sprintf(`Number(document.querySelector('figure[data-measure=%q] .bar.today')?.dataset.value ?? 0)`, measure)
	}
	if err := chromedp.Do(ctx, poll(today("cpu")+" > 0 && "+today("memory")+" > 0 && "+today("cost")+" > 0"), shoot("usage")); err != nil {
		t.Fatalf("usage of today: %v", err)
	}
	shownMem, err := eval[float64](ctx, today("memory"))
	if err != nil {
		t.Fatal(err)
	}
	earlier, err := eval[[]string](ctx, `Array.from(document.querySelectorAll('figure[data-measure="memory"] .bar:not(.today)')).filter(b => b.dataset.value !== "0").map(b => b.dataset.day)`)
	if err != nil {
		t.Fatal(err)
	}
	u, err := h.c.Usage(ctxT(t), client.UsageQuery{Since: day0, Until: day0.Add(24 * time.Hour), GroupBy: api.UsageBySandbox})
	if err != nil {
		t.Fatal(err)
	}
	var mem float64
	for _, e := range u.Usage {
		if e.SandboxID == sb.Sandbox.ID {
			mem = e.MemoryGiBSeconds
		}
	}
	if shownMem <= 0 || shownMem > mem {
		t.Errorf("the usage tab shows %g GiB·s of memory today; sbxd answers %g a moment later", shownMem, mem)
	}
	if len(earlier) > 0 && time.Now().UTC().Truncate(24*time.Hour).Equal(day0) {
		t.Errorf("the usage tab shows memory on %q, before the sandbox existed", earlier)
	}
	if p := problems(); len(p) > 0 {
		t.Errorf("the page raised: %q", p)
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// TestConsoleCrossOrigin: a page of another origin, in the same real
// browser, holding the key: its fetch of the API fails (sbxd answers no
// CORS), and its WebSocket to the terminal is refused (403 before anything
// runs). (That the console cannot be framed is the CSP's frame-ancestors,
// checked in internal/console.)
func TestConsoleCrossOrigin(t *testing.T) {
	sb := newSandbox(t, api.CreateSandboxRequest{})
	name := sb.Sandbox.Name
	key := base64.RawURLEncoding.EncodeToString([]byte(h.apiKey))
	// The other site: a loopback server of the test, another origin
	// (another port) than sbxd's.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>
const out = {};
const done = () => { document.title = JSON.stringify(out); };
fetch("http://%[1]s/v1/sandboxes", {headers: {Authorization: "Bearer %[2]s"}})
  .then(r => { out.fetch = "answered " + r.status; }, e => { out.fetch = "failed"; })
  .then(() => {
    const ws = new WebSocket("ws://%[1]s/v1/sandboxes/%[3]s/exec?tty=1&cmd=touch&cmd=/tmp/cross-origin", ["sbx.tty", "bearer.%[4]s"]);
    ws.onopen = () => { out.ws = "open"; ws.close(); done(); };
    ws.onerror = () => { out.ws = "refused"; done(); };
  });
</script>`, h.listen, h.apiKey, name, key)
	}))
	defer evil.Close()

	ctx, _ := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(evil.URL),
		poll(`document.title.includes("ws")`),
	); err != nil {
		t.Fatalf("the other site's page: %v", err)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if title != `{"fetch":"failed","ws":"refused"}` {
		t.Errorf("another origin with the key got %s, want its fetch failed and its WebSocket refused", title)
	}
	if res := sh(t, sb, "test -e /tmp/cross-origin && echo ran || echo no"); strings.TrimSpace(res.Stdout) != "no" {
		t.Errorf("the cross-origin terminal ran its command: %q", res.Stdout)
	}
}
