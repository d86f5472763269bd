// Package console is sbxd's web console: a static single-page app, built
// from web/ (TypeScript, xterm.js; esbuild) into dist/ and embedded in the
// binary, that talks to sbxd only through the public REST API with the API
// key a person signs in with (docs/console.md). sbxd serves it on its TCP
// listener at "/" (the page) and "/console/" (its assets); the Unix socket
// does not serve it.
//
// The page and its assets hold no data: everything shown comes from the
// API under the key, so every rule of the API (401 without a key, 404 for
// what another tenant's key made) applies unchanged. This package only
// serves the files, with headers that keep the page from being framed, from
// running inline or foreign script (a Content-Security-Policy), and from
// being fetched by another site (fetch metadata, Origin).
package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

//go:embed dist
var dist embed.FS

// Prefix is the path under which the console's assets are served; the page
// itself is served at "/".
const Prefix = "/console/"

// CSP is the Content-Security-Policy of every answer of the console: script
// only from sbxd's own origin (no inline script, no eval), connections
// (fetch, the terminal's WebSocket) only to it, no frames, no plugins, and
// the page cannot be framed by anyone. Inline styles are allowed: xterm.js
// sizes its rows with style elements.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self'; connect-src 'self'; base-uri 'none'; " +
	"form-action 'none'; frame-ancestors 'none'"

// Config is what the console needs to know of the sbxd serving it.
type Config struct {
	// PreviewDomain is sbxd's domain of host-based previews ("" when off),
	// from which the page builds its preview links
	// (http://<port>-<name>.<PreviewDomain>:<sbxd's port>/).
	PreviewDomain string
}

// Handler serves the console: GET or HEAD of "/" answers the page, of
// Prefix+file an asset, of Prefix+"config.json" the page's settings
// ({"preview_domain": "..."}). Other paths are 404 and other methods 405
// (plain text: the console is not the API). A request another site made is
// 403: one whose Sec-Fetch-Site is cross-site or same-site unless it is a
// top-level navigation (a link to the console is fine, a frame, a script
// or a fetch is not), or whose Origin is not sbxd's own.
func Handler(cfg Config) http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed above guarantees dist exists
	}
	settings, _ := json.Marshal(map[string]string{"preview_domain": cfg.PreviewDomain})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		if !SameOrigin(r) {
			http.Error(w, "the console answers only its own pages (cross-origin request refused)", http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var name string
		switch {
		case r.URL.Path == "/":
			name = "index.html"
		case r.URL.Path == Prefix+"config.json":
			h.Set("Content-Type", "application/json")
			http.ServeContent(w, r, "config.json", time.Time{}, bytes.NewReader(settings))
			return
		case strings.HasPrefix(r.URL.Path, Prefix):
			name = strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		}
		if name == "" || name == "index.html" && r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}

// Serves reports whether path is the console's: "/" or under Prefix.
func Serves(path string) bool {
	return path == "/" || strings.HasPrefix(path, Prefix)
}

// SameOrigin reports whether r may be answered by the console: it was not
// made by another site. Browsers say where a request comes from in
// Sec-Fetch-Site (Fetch Metadata, W3C) and, for scripts' requests, in
// Origin; a request with neither (curl, an old browser's navigation) is
// allowed, since it carries no credential of the console anyway. A
// cross-site top-level navigation (a link or a typed URL from another
// page) is allowed too: it shows the sign-in page and nothing else.
func SameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		(r.Method == http.MethodGet || r.Method == http.MethodHead)
}
