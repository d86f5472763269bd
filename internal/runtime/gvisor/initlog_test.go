package gvisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInitLogBounded: 5 MiB of init output leave at most 2×InitLogMax on
// the host, the newest output last.
func TestInitLogBounded(t *testing.T) {
	bundle := t.TempDir()
	l, in, out, err := newInitLog(bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	defer in.Close()
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 80 {
		if _, err := out.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := out.WriteString("\nthe-end\n"); err != nil {
		t.Fatal(err)
	}
	out.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(bundle, "init.log"))
		if strings.HasSuffix(string(b), "the-end\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init.log does not end with the last output (%d bytes)", len(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, n := range []string{"init.log", "init.log.1"} {
		fi, err := os.Stat(filepath.Join(bundle, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > InitLogMax {
			t.Fatalf("%s is %d bytes, more than %d", n, fi.Size(), InitLogMax)
		}
	}
}
