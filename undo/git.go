package undo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sbxhq/sbx/api"
)

// The git undo of docs/undo.md: sbxd runs GitSnapshotScript in the
// sandbox before a guarded command (undo "git", or "auto" for a command
// of class Git), and GitRollbackScript after it failed. Both run with sh -c
// in the command's cwd, as the command's user, inside the sandbox: what
// they print is the guest's text and is checked before it is used
// (ParseGitSnapshot).

// GitSnapshotScript records the git work tree that holds the current
// directory without touching it: HEAD, its ref, the index as a tree, and
// the working tree with its untracked (not ignored) files as a second tree
// (kept alive by refs/sbx/guard). It exits 3 outside a work tree (or
// without git), else prints five lines: the top directory, HEAD's commit
// ("none" in an empty repository), HEAD's ref ("detached" when none), the
// index tree and the working tree.
const GitSnapshotScript = `set -e
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 3
top=$(git rev-parse --show-toplevel)
cd "$top"
head=$(git rev-parse -q --verify HEAD || echo none)
ref=$(git symbolic-ref -q HEAD || echo detached)
itree=$(git write-tree)
idx=$(mktemp)
cp "$(git rev-parse --git-path index)" "$idx" 2>/dev/null || rm -f "$idx"
wtree=$(GIT_INDEX_FILE="$idx" git add -A . && GIT_INDEX_FILE="$idx" git write-tree)
rm -f "$idx"
c=$(git commit-tree "$wtree" -m "sbx guard")
git update-ref refs/sbx/guard "$c"
printf '%s\n' "$top" "$head" "$ref" "$itree" "$wtree"`

// GitRollbackScript puts a work tree back to a GitSnapshotScript record,
// given as $1..$5 (GitRollbackArgv): it aborts a rebase, merge,
// cherry-pick, revert or am in progress, moves HEAD and its ref back,
// checks the recorded working tree out (deleting files that were not
// there, ignored ones kept), and restores the index.
const GitRollbackScript = `set -e
cd "$1"
for op in rebase merge cherry-pick revert am; do git "$op" --abort >/dev/null 2>&1 || true; done
if [ "$2" != none ]; then
  if [ "$3" = detached ]; then git update-ref --no-deref HEAD "$2"
  else git update-ref "$3" "$2" && git symbolic-ref HEAD "$3"; fi
fi
git read-tree "$5"
git checkout-index -a -f
git clean -fdq
git read-tree "$4"`

// GitNotWorkTree is GitSnapshotScript's exit code outside a git work tree
// (or where git is not installed).
const GitNotWorkTree = 3

// ErrGitRecord is the error of ParseGitSnapshot for output that is not a
// record of GitSnapshotScript.
var ErrGitRecord = errors.New("not a git snapshot record")

// ParseGitSnapshot reads GitSnapshotScript's output: five lines (the top
// directory may itself hold newlines: it is all but the last four). Each
// field is checked, since the guest wrote it: an absolute directory, a
// 40- or 64-digit hex object id (or "none" for HEAD), a ref under refs/
// (or "detached").
//
// Errors: ErrGitRecord, wrapped with what was wrong.
func ParseGitSnapshot(out string) (api.GitUndo, error) {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 5 {
		return api.GitUndo{}, fmt.Errorf("%w: %d lines, want 5", ErrGitRecord, len(lines))
	}
	n := len(lines)
	g := api.GitUndo{
		Repo: strings.Join(lines[:n-4], "\n"), Head: lines[n-4], Ref: lines[n-3],
		IndexTree: lines[n-2], WorkTree: lines[n-1],
	}
	switch {
	case !strings.HasPrefix(g.Repo, "/") || strings.ContainsRune(g.Repo, 0):
		return api.GitUndo{}, fmt.Errorf("%w: top directory %q is not absolute", ErrGitRecord, g.Repo)
	case g.Head != "none" && !objectID(g.Head):
		return api.GitUndo{}, fmt.Errorf("%w: head %q", ErrGitRecord, g.Head)
	case g.Ref != "detached" && !validRef(g.Ref):
		return api.GitUndo{}, fmt.Errorf("%w: ref %q", ErrGitRecord, g.Ref)
	case !objectID(g.IndexTree) || !objectID(g.WorkTree):
		return api.GitUndo{}, fmt.Errorf("%w: trees %q %q", ErrGitRecord, g.IndexTree, g.WorkTree)
	}
	return g, nil
}

// GitRollbackArgv is the argv that runs GitRollbackScript on record g.
func GitRollbackArgv(g api.GitUndo) []string {
	return []string{"sh", "-c", GitRollbackScript, "sh", g.Repo, g.Head, g.Ref, g.IndexTree, g.WorkTree}
}

// objectID reports whether s is a git object id: 40 (SHA-1) or 64
// (SHA-256) lowercase hex digits.
func objectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validRef reports whether s is a ref name under refs/ with none of the
// characters git refuses (git-check-ref-format) nor a leading '-'.
func validRef(s string) bool {
	if !strings.HasPrefix(s, "refs/") || strings.Contains(s, "..") || strings.Contains(s, "@{") || strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".lock") {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	return true
}
