package api

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// Every error code of the API is known to the Python and TypeScript SDKs,
// with the HTTP status sbxd sends for it: an SDK that does not know a code
// hands its users a bare SbxError they cannot catch by type.
func TestSDKsKnowEveryCode(t *testing.T) {
	src, err := os.ReadFile("errors.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := regexp.MustCompile(`(?m)^\s*Code\w+\s+Code\s*=\s*"([a-z_]+)"`).FindAllSubmatch(src, -1)
	if len(codes) < 20 {
		t.Fatalf("found %d codes in errors.go; the pattern no longer matches it", len(codes))
	}
	py, err := os.ReadFile("../sdk/python/sbx/errors.py")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := os.ReadFile("../sdk/typescript/src/errors.ts")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range codes {
		code := string(m[1])
		status := Code(code).HTTPStatus()
		if !regexp.MustCompile(`CODE = "` + code + `"`).Match(py) {
			t.Errorf("Python SDK: no error class with CODE = %q", code)
		}
		st := regexp.MustCompile(`(?m)^\s*` + code + `: (\d+),`).FindSubmatch(ts)
		if st == nil {
			t.Errorf("TypeScript SDK: %s has no status in codeStatus", code)
		} else if n, _ := strconv.Atoi(string(st[1])); n != status {
			t.Errorf("TypeScript SDK: %s has status %d, sbxd sends %d", code, n, status)
		}
		if !regexp.MustCompile(`(?m)^\s*` + code + `: \w+Error,`).Match(ts) {
			t.Errorf("TypeScript SDK: %s has no class in errorClasses", code)
		}
	}
}
