package undo

import (
	"encoding/json"
	"os"
	"testing"
)

// TestForSharedVectors holds For to the vectors every SDK runs.
func TestForSharedVectors(t *testing.T) {
	b, err := os.ReadFile("../sdk/testdata/checkpoint_for.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases [][2]string `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) < 100 {
		t.Fatalf("only %d cases", len(f.Cases))
	}
	for _, c := range f.Cases {
		want, ok := ParseKind(c[1])
		if !ok {
			t.Fatalf("%q: bad kind %q", c[0], c[1])
		}
		if got := For(c[0]); got != want {
			t.Errorf("For(%q) = %s, want %s", c[0], got, want)
		}
	}
}

func TestKindOrder(t *testing.T) {
	if !(None < Git && Git < Checkpoint && Checkpoint < Fork) {
		t.Fatal("kinds out of order")
	}
	for _, k := range []Kind{None, Git, Checkpoint, Fork} {
		if got, ok := ParseKind(k.String()); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, got, ok)
		}
	}
	if _, ok := ParseKind("snapshot"); ok {
		t.Error("ParseKind accepted snapshot")
	}
}

// TestForArgv: an argv is classified by its words, and sh -c by its line;
// words are not re-split, so a quoted argument stays one word.
func TestForArgv(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want Kind
	}{
		{nil, None},
		{[]string{"ls", "-l", "/etc"}, None},
		{[]string{"rm", "-rf", "build dir"}, Git},
		{[]string{"rm", "-rf", "/etc"}, Checkpoint},
		{[]string{"/bin/sh", "-c", "echo x > f; exit 1"}, Git},
		{[]string{"bash", "-c", "psql -c 'DROP TABLE t'"}, Fork},
		{[]string{"python3", "-c", "print(1)"}, Checkpoint},
	} {
		if got := ForArgv(c.argv); got != c.want {
			t.Errorf("ForArgv(%q) = %s, want %s", c.argv, got, c.want)
		}
	}
}
