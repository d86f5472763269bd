package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, "http://sbx.test:7070"+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// TestPageAndAssets: "/" is the page, with the CSP; the page runs no
// inline script (every script is a file of the console, no on* handler
// attributes) and every asset it names is served with its type.
func TestPageAndAssets(t *testing.T) {
	h := Handler(Config{PreviewDomain: "localhost"})
	rec := get(t, h, "GET", "/")
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	for k, want := range map[string]string{"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(CSP, "script-src 'self';") || strings.Contains(CSP, "unsafe-eval") || !strings.Contains(CSP, "frame-ancestors 'none'") {
		t.Errorf("CSP allows inline or foreign script or framing: %s", CSP)
	}
	page := rec.Body.String()
	scripts := regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1)
	if len(scripts) == 0 {
		t.Fatal("the page loads no script")
	}
	for _, s := range scripts {
		if !strings.Contains(s, `src="/console/`) {
			t.Errorf("inline or foreign script: %s", s)
		}
	}
	if regexp.MustCompile(`(?i)\son[a-z]+=`).MatchString(page) {
		t.Error("the page has an inline event handler attribute")
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="(/console/[^"]+)"`).FindAllStringSubmatch(page, -1) {
		a := get(t, h, "GET", m[1])
		ct := a.Header().Get("Content-Type")
		if a.Code != 200 || a.Body.Len() == 0 || (strings.HasSuffix(m[1], ".js") && !strings.Contains(ct, "javascript")) ||
			(strings.HasSuffix(m[1], ".css") && !strings.HasPrefix(ct, "text/css")) {
			t.Errorf("GET %s: %d %s (%d bytes)", m[1], a.Code, ct, a.Body.Len())
		}
		if a.Header().Get("Content-Security-Policy") != CSP {
			t.Errorf("GET %s has no CSP", m[1])
		}
	}
	c := get(t, h, "GET", "/console/config.json")
	if b, _ := io.ReadAll(c.Body); c.Code != 200 || string(b) != `{"preview_domain":"localhost"}` {
		t.Errorf("config.json: %d %s", c.Code, b)
	}
}

// TestOnlyItsFiles: paths that are not the console's files are 404, and
// methods other than GET and HEAD 405; nothing outside dist is reachable.
func TestOnlyItsFiles(t *testing.T) {
	h := Handler(Config{})
	for _, p := range []string{"/console/", "/console/index.html", "/console/nope.js", "/console/../console/app.js/..", "/console/..%2fconsole.go", "/console/../../console.go", "/index.html"} {
		if rec := get(t, h, "GET", p); rec.Code != 404 {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		if rec := get(t, h, m, "/"); rec.Code != 405 || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /: %d, want 405", m, rec.Code)
		}
	}
	if rec := get(t, h, "HEAD", "/console/app.js"); rec.Code != 200 {
		t.Errorf("HEAD /console/app.js: %d", rec.Code)
	}
	if !Serves("/") || !Serves("/console/app.js") || Serves("/v1/sandboxes") || Serves("/consolex") {
		t.Error("Serves claims the wrong paths")
	}
}

// TestRefusesCrossOrigin: another site can link to the console but not
// frame it, load its files into its own page, or fetch them.
func TestRefusesCrossOrigin(t *testing.T) {
	h := Handler(Config{})
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"no metadata (curl)", nil, 200},
		{"typed URL", []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, 200},
		{"own page", []string{"Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Origin", "http://sbx.test:7070"}, 200},
		{"link from another site", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, 200},
		{"frame on another site", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe"}, 403},
		{"fetch from another site", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors", "Origin", "http://evil.test"}, 403},
		{"script tag of a sibling site", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "script"}, 403},
		{"foreign Origin alone", []string{"Origin", "http://evil.test"}, 403},
		{"Origin of another port", []string{"Origin", "http://sbx.test:7071"}, 403},
		{"opaque Origin", []string{"Origin", "null"}, 403},
	} {
		rec := get(t, h, "GET", "/", tc.hdr...)
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.want)
		}
		if tc.want == 403 && strings.Contains(rec.Body.String(), "<script") {
			t.Errorf("%s: the refusal carries the page", tc.name)
		}
	}
}
