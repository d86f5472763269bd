package undo

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strconv"
	"strings"
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

// TestExplain: the reason names the part of the line that decided the
// kind, and what undoes it.
func TestExplain(t *testing.T) {
	for _, c := range []struct {
		line string
		want Kind
		has  string
	}{
		{"", None, "runs nothing"},
		{"ls -l && cat README", None, "`ls` only reads"},
		{"ls; git checkout -- .", Git, "`git checkout` edits files"},
		{"echo hi > notes.txt", Git, "redirection to notes.txt"},
		{"rm -rf /etc/x", Checkpoint, "/etc/x may be outside the working tree"},
		{"npm install left-pad", Checkpoint, "`npm install` changes the system"},
		{"frobnicate --all", Checkpoint, "`frobnicate` is not a program the classifier knows"},
		{"echo $(id)", Checkpoint, "substitution"},
		{"sh -c 'psql -c \"DROP TABLE t\"'", Fork, "`psql` changes running processes"},
	} {
		k, why := Explain(c.line)
		if k != c.want || !strings.Contains(why, c.has) {
			t.Errorf("Explain(%q) = %s, %q; want %s and %q", c.line, k, why, c.want, c.has)
		}
	}
	if k, why := ExplainArgv([]string{"rm", "-rf", "build dir"}); k != Git || !strings.Contains(why, "`rm`") {
		t.Errorf("ExplainArgv(rm) = %s, %q", k, why)
	}
}

// TestRuledProgramsMatchSwitch: ruledPrograms (which makes a reason say
// "a program the classifier knows") lists exactly the cases of program's
// switch, so a rule added there is not reported as unknown.
func TestRuledProgramsMatchSwitch(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "classify.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "program" {
			continue
		}
		for _, st := range fn.Body.List {
			sw, ok := st.(*ast.SwitchStmt)
			if !ok || sw.Tag == nil {
				continue
			}
			for _, cl := range sw.Body.List {
				for _, e := range cl.(*ast.CaseClause).List {
					if lit, ok := e.(*ast.BasicLit); ok {
						s, _ := strconv.Unquote(lit.Value)
						cases[s] = true
					}
				}
			}
		}
	}
	if len(cases) == 0 || !reflect.DeepEqual(cases, ruledPrograms) {
		t.Fatalf("program's switch has %v, ruledPrograms %v", cases, ruledPrograms)
	}
}

// TestParseGitSnapshot: a record is read back field by field (a top
// directory with a newline included), and what a guest could print
// instead is refused.
func TestParseGitSnapshot(t *testing.T) {
	h := strings.Repeat("a", 40)
	g, err := ParseGitSnapshot("/workspace/my\nrepo\n" + h + "\nrefs/heads/main\n" + h + "\n" + h + "\n")
	if err != nil || g.Repo != "/workspace/my\nrepo" || g.Head != h || g.Ref != "refs/heads/main" || g.IndexTree != h || g.WorkTree != h {
		t.Fatalf("got %+v, %v", g, err)
	}
	if g, err := ParseGitSnapshot("/r\nnone\ndetached\n" + h + "\n" + h); err != nil || g.Head != "none" || g.Ref != "detached" {
		t.Fatalf("empty repository: %+v, %v", g, err)
	}
	argv := GitRollbackArgv(g)
	if len(argv) != 9 || argv[2] != GitRollbackScript || argv[4] != "/workspace/my\nrepo" {
		t.Fatalf("argv %q", argv)
	}
	for _, bad := range []string{
		"",
		"/r\n" + h + "\nrefs/heads/main\n" + h, // 4 lines
		"r\nnone\ndetached\n" + h + "\n" + h,   // relative top
		"/r\n--exec=x\ndetached\n" + h + "\n" + h,                   // head not an id
		"/r\nnone\n-refs/x\n" + h + "\n" + h,                        // ref
		"/r\nnone\nrefs/heads/a b\n" + h + "\n" + h,                 // ref with a space
		"/r\nnone\nrefs/../../x\n" + h + "\n" + h,                   // ref with ..
		"/r\nnone\ndetached\n" + strings.ToUpper(h) + "\n" + h,      // index tree
		"/r\nnone\ndetached\n" + h + "\n" + strings.Repeat("a", 41), // work tree
	} {
		if _, err := ParseGitSnapshot(bad); !errors.Is(err, ErrGitRecord) {
			t.Errorf("ParseGitSnapshot(%q): %v, want ErrGitRecord", bad, err)
		}
	}
}
