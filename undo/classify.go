// Package undo classifies shell commands by the lightest undo that covers
// what they can break: the checkpointFor of docs/undo.md, shared by sbxd's
// guarded exec ("undo": "auto") and the Go client's helpers. The TypeScript
// and Python SDKs implement the same algorithm; sdk/testdata/checkpoint_for.json
// holds all three to it.
//
// The classification is a convenience, not a security boundary: it reads
// the text of a command, and a command can do more than its text says. The
// sandbox is the boundary.
package undo

import (
	"fmt"
	"path"
	"strings"
)

// Kind is an undo kind, ordered None < Git < Checkpoint < Fork.
type Kind int

// The kinds, lightest first.
const (
	// None: the command reads; nothing to undo.
	None Kind = iota
	// Git: it edits files of the working tree; a repository snapshot
	// (docs/undo.md) undoes it.
	Git
	// Checkpoint: it changes the system or files git does not track; a
	// disk checkpoint undoes it.
	Checkpoint
	// Fork: it changes running processes or servers' state; a live copy
	// (fork) keeps the original untouched.
	Fork
)

// String is the kind's name on the wire: "none", "git", "checkpoint", "fork".
func (k Kind) String() string {
	switch k {
	case Git:
		return "git"
	case Checkpoint:
		return "checkpoint"
	case Fork:
		return "fork"
	}
	return "none"
}

// ParseKind is the inverse of String; ok is false for any other text.
func ParseKind(s string) (k Kind, ok bool) {
	for _, k := range []Kind{None, Git, Checkpoint, Fork} {
		if k.String() == s {
			return k, true
		}
	}
	return None, false
}

// For classifies a shell command line (as run by sh -c) by the steps of
// docs/undo.md: split into simple commands, drop assignments and wrappers,
// look the program up in the tables, apply the path rule; the line gets the
// highest kind of its parts. An empty line is None; a line the parser does
// not follow (command substitution, process substitution, an unterminated
// quote) is Checkpoint.
func For(command string) Kind {
	k, _ := Explain(command)
	return k
}

// ForArgv classifies a command given as an argv, as exec's cmd is: its
// words are taken as they are, without shell parsing, and ["sh", "-c", S]
// classifies the line S. An empty argv is None.
func ForArgv(argv []string) Kind {
	k, _ := ExplainArgv(argv)
	return k
}

// Explain is For with the reason: one English sentence that names the
// part of the line that decided the kind and what undoes it (POST
// /v1/classify answers it, docs/api.md).
func Explain(command string) (Kind, string) {
	v := classifyLine(command, 0)
	return v.k, v.why
}

// ExplainArgv is ForArgv with the reason, as Explain.
func ExplainArgv(argv []string) (Kind, string) {
	if len(argv) == 0 {
		return None, "an empty command runs nothing: nothing to undo"
	}
	v := classifySimple(argv, 0)
	return v.k, v.why
}

// verdict is a kind and the sentence that says why.
type verdict struct {
	k   Kind
	why string
}

// classifyLine classifies a shell line: the highest verdict of its simple
// commands (the first of equals).
func classifyLine(line string, depth int) verdict {
	cmds, ok := split(line)
	if !ok {
		return verdict{Checkpoint, "the line has a command or process substitution or an unterminated quote, which the classifier does not follow: a disk checkpoint covers whatever it does"}
	}
	v := verdict{None, "an empty command runs nothing: nothing to undo"}
	for i, words := range cmds {
		if c := classifySimple(words, depth); i == 0 || c.k > v.k {
			v = c
		}
	}
	return v
}

// reason says why a command of kind k was given it: what names the
// command (a program, with its subcommand for git).
func reason(k Kind, what string) string {
	switch k {
	case None:
		return what + " only reads: nothing to undo"
	case Git:
		return what + " edits files in the working tree: a git snapshot of the repository undoes it (a disk checkpoint outside a git work tree)"
	case Checkpoint:
		return what + " changes the system or files git does not track: a disk checkpoint undoes it"
	}
	return what + " changes running processes or a server's state: a memory snapshot (or a live copy) keeps them"
}

// split breaks a line into simple commands, each a list of words with the
// quotes removed. ok is false when the line has $(, `, <(, >( or an
// unterminated quote outside single quotes.
func split(line string) (cmds [][]string, ok bool) {
	var words []string
	var cur strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\':
			if i+1 < len(line) {
				i++
				if line[i] != '\n' {
					cur.WriteByte(line[i])
					inWord = true
				}
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			cur.WriteString(line[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				switch {
				case line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
					i++
					cur.WriteByte(line[i])
				case line[i] == '`', line[i] == '$' && i+1 < len(line) && line[i+1] == '(':
					return nil, false
				default:
					cur.WriteByte(line[i])
				}
			}
			if i >= len(line) {
				return nil, false
			}
			inWord = true
		case c == '`':
			return nil, false
		case c == '$' && i+1 < len(line) && line[i+1] == '(':
			return nil, false
		case (c == '<' || c == '>') && i+1 < len(line) && line[i+1] == '(':
			return nil, false
		case c == ';' || c == '\n' || c == '|':
			endCmd()
			if i+1 < len(line) && c == '|' && line[i+1] == '|' {
				i++
			}
		case c == '&':
			switch {
			case i+1 < len(line) && line[i+1] == '&':
				endCmd()
				i++
			case i+1 < len(line) && line[i+1] == '>':
				// &> redirection: part of a word.
				cur.WriteByte(c)
				inWord = true
			case inWord && strings.HasSuffix(cur.String(), ">"):
				// 2>&1: part of the redirection word.
				cur.WriteByte(c)
			default:
				endCmd()
			}
		case c == ' ' || c == '\t':
			endWord()
		case c == '>' || c == '<':
			// A redirection starts a word of its own unless it follows
			// digits (2>) or & (&>) of the same word.
			if inWord && !isRedirPrefix(cur.String()) {
				endWord()
			}
			cur.WriteByte(c)
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	endCmd()
	return cmds, true
}

// isRedirPrefix reports whether s can precede > in one redirection word:
// a file descriptor number, &, or a redirection already (>>).
func isRedirPrefix(s string) bool {
	if s == "&" || strings.HasSuffix(s, ">") || strings.HasSuffix(s, "<") {
		return true
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// redirect parses a redirection word: isRedir, whether it writes, and its
// target ("" when the target is the next word).
func redirect(w string) (isRedir, write bool, target string) {
	s := strings.TrimLeft(w, "0123456789")
	s = strings.TrimPrefix(s, "&")
	switch {
	case strings.HasPrefix(s, ">>"):
		return true, true, s[2:]
	case strings.HasPrefix(s, ">"):
		return true, true, strings.TrimPrefix(s[1:], "|")
	case strings.HasPrefix(s, "<"):
		return true, false, strings.TrimLeft(s, "<")
	}
	return false, false, ""
}

// ignoredTarget: redirections that write nothing to a file.
func ignoredTarget(t string) bool {
	switch t {
	case "/dev/null", "/dev/stdout", "/dev/stderr", "&1", "&2", "&-":
		return true
	}
	return strings.HasPrefix(t, "&")
}

// classifySimple classifies one simple command's words; depth bounds the
// recursion into sh -c.
func classifySimple(all []string, depth int) verdict {
	// Redirections out of the words.
	var words, writes []string
	for i := 0; i < len(all); i++ {
		isR, write, target := redirect(all[i])
		if !isR {
			words = append(words, all[i])
			continue
		}
		if target == "" && i+1 < len(all) {
			i++
			target = all[i]
		}
		if write && !ignoredTarget(target) {
			writes = append(writes, target)
		}
	}
	words = dropPrefixes(words)
	var v verdict
	var args []string // the arguments the path rule looks at
	if len(words) == 0 {
		v = verdict{None, "an empty command runs nothing: nothing to undo"}
	} else {
		prog := path.Base(words[0])
		if (prog == "sh" || prog == "bash" || prog == "dash" || prog == "zsh") && len(words) >= 3 && isDashC(words[1]) {
			if depth > 4 {
				return verdict{Checkpoint, "shells nested more than 4 deep are not followed: a disk checkpoint covers whatever they do"}
			}
			v = classifyLine(words[2], depth+1)
		} else {
			var k Kind
			k, args = program(prog, words[1:])
			v = verdict{k, reason(k, "`"+commandName(prog, words[1:])+"`")}
			if k == Checkpoint && !known(prog) {
				v.why = "`" + prog + "` is not a program the classifier knows: a disk checkpoint covers whatever it does"
			}
		}
	}
	if len(writes) > 0 && v.k < Git {
		v = verdict{Git, reason(Git, "the redirection to "+writes[0])}
	}
	if v.k == Git {
		for _, a := range append(args, writes...) {
			if outside(a) {
				return verdict{Checkpoint, fmt.Sprintf("%s may be outside the working tree (an absolute path, ~, .. or a variable), where git does not reach: a disk checkpoint undoes it", a)}
			}
		}
	}
	return v
}

// commandName is how a reason names a command: the program, with its
// subcommand for programs that have them (git commit, npm install).
func commandName(prog string, args []string) string {
	switch prog {
	case "git", "npm", "pip", "pip3", "go", "cargo", "apt", "apt-get", "rails", "rake", "prisma", "knex", "sequelize", "npx", "docker", "podman", "systemctl":
		for len(args) > 0 && strings.HasPrefix(args[0], "-") {
			if prog == "git" && (args[0] == "-C" || args[0] == "-c") && len(args) > 1 {
				args = args[1:]
			}
			args = args[1:]
		}
		if len(args) > 0 {
			return prog + " " + args[0]
		}
	}
	return prog
}

// known reports whether the classifier has a rule for prog (else it is
// Checkpoint because nothing is known of it).
func known(prog string) bool {
	return readPrograms[prog] || editPrograms[prog] || forkPrograms[prog] || ruledPrograms[prog]
}

// isDashC reports whether w is -c or a bundle of short options with c
// (-lc, -ec, -xc): the shell's next word is the command line.
func isDashC(w string) bool {
	return len(w) >= 2 && w[0] == '-' && w[1] != '-' && strings.IndexByte(w[1:], 'c') >= 0
}

// dropPrefixes drops leading NAME=value words and wrappers with their
// options. When nothing follows a wrapper, the wrapper is the program.
func dropPrefixes(w []string) []string {
	for len(w) > 0 && isAssignment(w[0]) {
		w = w[1:]
	}
	for len(w) > 0 {
		var rest []string
		switch path.Base(w[0]) {
		case "sudo":
			rest = skipOpts(w[1:], map[string]bool{"-u": true, "-g": true, "-C": true, "-D": true})
		case "env":
			rest = skipOpts(w[1:], map[string]bool{"-u": true, "-C": true, "-S": true})
			for len(rest) > 0 && isAssignment(rest[0]) {
				rest = rest[1:]
			}
		case "nice":
			rest = skipOpts(w[1:], map[string]bool{"-n": true})
		case "ionice":
			rest = skipOpts(w[1:], map[string]bool{"-c": true, "-n": true, "-p": true})
		case "nohup", "time", "command", "exec":
			rest = skipOpts(w[1:], nil)
		case "stdbuf":
			rest = skipOpts(w[1:], map[string]bool{"-i": true, "-o": true, "-e": true})
		case "timeout":
			rest = skipOpts(w[1:], map[string]bool{"-s": true, "-k": true})
			if len(rest) > 0 {
				rest = rest[1:] // the duration
			}
		case "xargs":
			rest = skipOpts(w[1:], map[string]bool{"-I": true, "-n": true, "-P": true, "-d": true, "-L": true, "-s": true, "-E": true, "-a": true})
		default:
			return w
		}
		if len(rest) == 0 {
			return w[:1]
		}
		w = rest
	}
	return w
}

// skipOpts drops leading options; those in withArg take the next word.
func skipOpts(w []string, withArg map[string]bool) []string {
	for len(w) > 0 && strings.HasPrefix(w[0], "-") && w[0] != "-" {
		if w[0] == "--" {
			return w[1:]
		}
		if withArg[w[0]] && len(w) > 1 {
			w = w[2:]
			continue
		}
		w = w[1:]
	}
	return w
}

func isAssignment(w string) bool {
	eq := strings.IndexByte(w, '=')
	if eq <= 0 {
		return false
	}
	for i, r := range w[:eq] {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// outside is the path rule: absolute (not under /tmp), ~, a ..
// component, or a $ (a variable: the path is not known).
func outside(p string) bool {
	if strings.Contains(p, "$") {
		return true
	}
	if p == "/tmp" || strings.HasPrefix(p, "/tmp/") {
		return strings.Contains("/"+p+"/", "/../")
	}
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~") {
		return true
	}
	return strings.Contains("/"+p+"/", "/../")
}

// nonOptions are the words that do not start with - (the path rule's
// candidates).
func nonOptions(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	return out
}

func has(args []string, opts ...string) bool {
	for _, a := range args {
		for _, o := range opts {
			if a == o {
				return true
			}
		}
	}
	return false
}

// shortFlag reports whether a short-option bundle (-fdx) among args holds c.
func shortFlag(args []string, c byte) bool {
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.IndexByte(a[1:], c) >= 0 {
			return true
		}
	}
	return false
}

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

var (
	readPrograms = set("ls", "cat", "head", "tail", "less", "more", "grep", "egrep", "fgrep", "rg", "ag",
		"wc", "echo", "printf", "pwd", "whoami", "id", "date", "which", "type", "file", "stat", "du", "df",
		"ps", "uname", "hostname", "diff", "cmp", "sort", "uniq", "cut", "tr", "awk", "jq", "test", "[",
		"true", "false", "sleep", "tree", "realpath", "readlink", "dirname", "basename", "md5sum", "sha1sum",
		"sha256sum", "env", "printenv", "man", "free", "uptime", "nproc", "seq", "yes", "column", "xxd",
		"od", "hexdump", "strings", "nl", "tac", "rev", "fold", "fmt", "paste", "join", "comm", "expr",
		"bc", "cd", "ping", "dig", "nslookup", "host", "exit", ":", "export", "set", "unset", "wait", "read",
		"shift", "return", "umask", "alias")
	editPrograms = set("rm", "mv", "cp", "touch", "mkdir", "rmdir", "ln", "chmod", "chown", "tee",
		"truncate", "patch", "unzip", "tar", "gzip", "gunzip", "zip", "dd", "install", "shred", "split",
		"csplit", "vi", "vim", "nano", "ed")
	forkPrograms = set("psql", "mysql", "mariadb", "mongo", "mongosh", "redis-cli", "pg_restore",
		"systemctl", "service", "supervisorctl", "kill", "pkill", "killall", "reboot", "shutdown", "halt",
		"docker", "podman", "alembic", "flyway", "liquibase")
	gitRead = set("status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "blame", "grep",
		"describe", "shortlog", "cat-file", "show-ref", "for-each-ref", "name-rev", "rev-list",
		"count-objects", "help", "version", "--version", "fetch", "push")
	gitDestroy = set("gc", "prune", "filter-branch", "filter-repo", "submodule", "init", "clone")
	// clone is here because a failed clone leaves a nested repository that
	// the git rollback's clean (-fd, not -ff) does not remove.
	// ruledPrograms have a rule of their own in program.
	ruledPrograms = set("find", "sed", "curl", "wget", "dd", "python", "python3", "node", "nodejs", "git",
		"rails", "rake", "npx", "prisma", "knex", "sequelize", "npm", "pip", "pip3", "go", "cargo", "apt",
		"apt-cache", "pg_dump", "dpkg", "make")
)

// program classifies a program (base name) with its arguments; args are
// what the path rule then checks when the kind is Git.
func program(prog string, args []string) (Kind, []string) {
	ops := nonOptions(args)
	sub := ""
	if len(ops) > 0 {
		sub = ops[0]
	}
	switch prog {
	case "find":
		if has(args, "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls") {
			return Checkpoint, nil
		}
		return None, nil
	case "sed":
		for _, a := range args {
			if strings.HasPrefix(a, "--in-place") || (strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.Contains(a, "i")) {
				return Git, ops[min(1, len(ops)):]
			}
		}
		return None, nil
	case "curl":
		for i, a := range args {
			switch {
			case a == "-o" || a == "--output":
				if i+1 < len(args) {
					return Git, []string{args[i+1]}
				}
				return Git, nil
			case a == "-O" || a == "--remote-name" || a == "--remote-name-all":
				return Git, nil
			case len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a[1:], "oO"):
				if strings.Contains(a[1:], "o") && i+1 < len(args) {
					return Git, []string{args[i+1]}
				}
				return Git, nil
			}
		}
		return None, nil
	case "wget":
		var paths []string
		for i, a := range args {
			if (a == "-O" || a == "--output-document") && i+1 < len(args) && args[i+1] == "-" {
				return None, nil
			}
			if a == "--output-document=-" || strings.HasSuffix(a, "O-") && strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") {
				return None, nil
			}
			switch {
			case (a == "-O" || a == "--output-document" || a == "-P" || a == "--directory-prefix") && i+1 < len(args):
				paths = append(paths, args[i+1])
			case strings.HasPrefix(a, "--output-document="), strings.HasPrefix(a, "--directory-prefix="):
				paths = append(paths, a[strings.IndexByte(a, '=')+1:])
			}
		}
		return Git, paths
	case "dd":
		var paths []string
		for _, a := range args {
			if f, ok := strings.CutPrefix(a, "of="); ok {
				paths = append(paths, f)
			}
		}
		return Git, paths
	case "python", "python3", "node", "nodejs":
		if len(args) > 0 && (args[0] == "--version" || args[0] == "-V" || args[0] == "-v") {
			return None, nil
		}
		if len(args) >= 2 && args[1] == "migrate" && path.Base(args[0]) == "manage.py" {
			return Fork, nil
		}
		return Checkpoint, nil
	case "git":
		return gitKind(args)
	case "rails", "rake":
		if strings.HasPrefix(sub, "db:") {
			return Fork, nil
		}
		return Checkpoint, nil
	case "npx":
		if len(ops) >= 2 && ops[0] == "prisma" && ops[1] == "migrate" ||
			len(ops) >= 2 && ops[0] == "knex" && strings.HasPrefix(ops[1], "migrate") ||
			len(ops) >= 2 && ops[0] == "sequelize" && ops[1] == "db:migrate" {
			return Fork, nil
		}
		return Checkpoint, nil
	case "prisma":
		if sub == "migrate" {
			return Fork, nil
		}
		return Checkpoint, nil
	case "knex":
		if strings.HasPrefix(sub, "migrate") {
			return Fork, nil
		}
		return Checkpoint, nil
	case "sequelize":
		if sub == "db:migrate" {
			return Fork, nil
		}
		return Checkpoint, nil
	case "npm":
		if sub == "ls" || sub == "list" || sub == "view" || sub == "outdated" || has(args, "--version", "-v") && len(args) == 1 {
			return None, nil
		}
		return Checkpoint, nil
	case "pip", "pip3":
		if sub == "list" || sub == "show" || sub == "freeze" || len(args) == 1 && args[0] == "--version" {
			return None, nil
		}
		return Checkpoint, nil
	case "go":
		if sub == "env" && (has(args, "-w", "-u")) {
			return Checkpoint, nil
		}
		if sub == "version" || sub == "env" || sub == "list" || sub == "vet" {
			return None, nil
		}
		return Checkpoint, nil
	case "cargo":
		if len(args) == 1 && args[0] == "--version" {
			return None, nil
		}
		return Checkpoint, nil
	case "apt":
		if sub == "list" {
			return None, nil
		}
		return Checkpoint, nil
	case "apt-cache":
		return None, nil
	case "pg_dump":
		for i, a := range args {
			if (a == "-f" || a == "--file") && i+1 < len(args) {
				return Git, []string{args[i+1]}
			}
			if f, ok := strings.CutPrefix(a, "--file="); ok {
				return Git, []string{f}
			}
		}
		return None, nil
	case "dpkg":
		if has(args, "-l", "-L", "-s", "--list", "--listfiles", "--status") {
			return None, nil
		}
		return Checkpoint, nil
	case "make":
		if has(args, "-n", "--dry-run", "--just-print") {
			return None, nil
		}
		return Checkpoint, nil
	}
	switch {
	case readPrograms[prog]:
		return None, nil
	case editPrograms[prog]:
		return Git, ops
	case forkPrograms[prog]:
		return Fork, nil
	}
	return Checkpoint, nil
}

// gitKind classifies git by its subcommand, after git's global options.
func gitKind(args []string) (Kind, []string) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch a := args[0]; {
		case a == "-C" || a == "-c":
			if len(args) < 2 {
				return None, nil
			}
			args = args[2:]
		case a == "--version" || a == "--help":
			return None, nil
		default:
			args = args[1:]
		}
	}
	if len(args) == 0 {
		return None, nil
	}
	sub, rest := args[0], args[1:]
	ops := nonOptions(rest)
	first := ""
	if len(ops) > 0 {
		first = ops[0]
	}
	switch {
	case gitRead[sub]:
		return None, nil
	case gitDestroy[sub]:
		return Checkpoint, nil
	}
	switch sub {
	case "remote":
		if len(rest) == 0 || has(rest, "-v", "--verbose") && len(ops) == 0 || first == "show" || first == "get-url" {
			return None, nil
		}
	case "branch":
		if has(rest, "-D", "-d", "--delete", "-m", "-M", "--move") {
			return Checkpoint, nil
		}
		if len(ops) == 0 {
			return None, nil
		}
	case "tag":
		if has(rest, "-d", "--delete") {
			return Checkpoint, nil
		}
		if len(rest) == 0 || has(rest, "-l", "--list") {
			return None, nil
		}
	case "config":
		if has(rest, "--get", "--get-all", "--list", "-l", "--get-regexp") {
			return None, nil
		}
		return Checkpoint, nil
	case "stash":
		switch first {
		case "list", "show":
			return None, nil
		case "drop", "clear":
			return Checkpoint, nil
		}
	case "reflog":
		switch first {
		case "", "show":
			return None, nil
		case "expire", "delete":
			return Checkpoint, nil
		}
	case "worktree":
		if first == "list" {
			return None, nil
		}
		return Checkpoint, nil
	case "clean":
		if shortFlag(rest, 'x') || shortFlag(rest, 'X') {
			return Checkpoint, nil
		}
	case "update-ref":
		if has(rest, "-d") {
			return Checkpoint, nil
		}
	}
	return Git, nil
}
