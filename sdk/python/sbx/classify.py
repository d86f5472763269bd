"""``checkpoint_for``: the lightest undo that covers a shell command (docs/undo.md).

Kinds, ordered: ``none < git < checkpoint < fork``. This is a convenience,
not a security boundary: it reads the text of a command, and a command can
do more than its text says. The sandbox is the boundary.

This module is a line-by-line port of the Go reference, ``undo/classify.go``
(same splitting, same redirection parsing, same tables, same special
cases), so that the Go, TypeScript and Python SDKs give the same kind for
every input, not only for the shared vectors of
``sdk/testdata/checkpoint_for.json``. Change the three together.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

__all__ = ["NONE", "GIT", "CHECKPOINT", "FORK", "KINDS", "checkpoint_for", "max_kind"]

NONE = "none"
GIT = "git"
CHECKPOINT = "checkpoint"
FORK = "fork"
#: The undo kinds, lightest first.
KINDS = (NONE, GIT, CHECKPOINT, FORK)
_RANK = {k: i for i, k in enumerate(KINDS)}

# Internally kinds are their ranks, as in Go.
_NONE, _GIT, _CHECKPOINT, _FORK = 0, 1, 2, 3


def max_kind(*kinds: str) -> str:
    """The heaviest of ``kinds`` (``none`` for none)."""
    best = NONE
    for k in kinds:
        if _RANK[k] > _RANK[best]:
            best = k
    return best


def checkpoint_for(command: str) -> str:
    """Classify a shell command line (as run by ``sh -c``) by the lightest undo that covers it.

    Returns ``"none"`` (reads), ``"git"`` (working-tree edits a repository
    snapshot undoes), ``"checkpoint"`` (system changes, paths outside the
    working tree, unknown programs: a disk checkpoint undoes them) or
    ``"fork"`` (running processes and servers' state: a live copy). A line
    gets the heaviest kind of its parts; an empty line is ``none``; a line
    the parser does not follow (command substitution, process
    substitution, an unterminated quote) is ``checkpoint``.
    """
    cmds = _split(command)
    if cmds is None:
        return CHECKPOINT
    k = _NONE
    for words in cmds:
        k = max(k, _classify_simple(words, 0))
    return KINDS[k]


def _split(line: str) -> Optional[List[List[str]]]:
    """Break a line into simple commands of words (quotes removed).

    ``None`` when the line has ``$(``, a backquote, ``<(``, ``>(`` or an
    unterminated quote outside single quotes.
    """
    cmds: List[List[str]] = []
    words: List[str] = []
    cur: List[str] = []
    in_word = False

    def end_word() -> None:
        nonlocal in_word
        if in_word:
            words.append("".join(cur))
            cur.clear()
            in_word = False

    def end_cmd() -> None:
        nonlocal words
        end_word()
        if words:
            cmds.append(words)
        words = []

    n = len(line)
    i = 0
    while i < n:
        c = line[i]
        if c == "\\":
            if i + 1 < n:
                i += 1
                if line[i] != "\n":
                    cur.append(line[i])
                    in_word = True
        elif c == "'":
            j = line.find("'", i + 1)
            if j < 0:
                return None
            cur.append(line[i + 1:j])
            in_word = True
            i = j
        elif c == '"':
            i += 1
            while i < n and line[i] != '"':
                d = line[i]
                if d == "\\" and i + 1 < n and line[i + 1] in '"\\$`':
                    i += 1
                    cur.append(line[i])
                elif d == "`" or (d == "$" and i + 1 < n and line[i + 1] == "("):
                    return None
                else:
                    cur.append(d)
                i += 1
            if i >= n:
                return None
            in_word = True
        elif c == "`":
            return None
        elif c == "$" and i + 1 < n and line[i + 1] == "(":
            return None
        elif c in "<>" and i + 1 < n and line[i + 1] == "(":
            return None
        elif c in ";\n|":
            end_cmd()
            if c == "|" and i + 1 < n and line[i + 1] == "|":
                i += 1
        elif c == "&":
            if i + 1 < n and line[i + 1] == "&":
                end_cmd()
                i += 1
            elif i + 1 < n and line[i + 1] == ">":
                cur.append(c)    # &> redirection: part of a word
                in_word = True
            elif in_word and "".join(cur).endswith(">"):
                cur.append(c)    # 2>&1: part of the redirection word
            else:
                end_cmd()
        elif c in " \t":
            end_word()
        elif c in "<>":
            # A redirection starts a word of its own unless it follows
            # digits (2>) or & (&>) of the same word.
            if in_word and not _is_redir_prefix("".join(cur)):
                end_word()
            cur.append(c)
            in_word = True
        else:
            cur.append(c)
            in_word = True
        i += 1
    end_cmd()
    return cmds


def _is_digits(s: str) -> bool:
    return s != "" and all("0" <= ch <= "9" for ch in s)


def _is_redir_prefix(s: str) -> bool:
    """Whether ``s`` can precede ``>`` in one redirection word: a descriptor number, ``&``, or ``>``/``<``."""
    if s == "&" or s.endswith(">") or s.endswith("<"):
        return True
    return _is_digits(s)


def _redirect(w: str) -> Tuple[bool, bool, str]:
    """A redirection word: (is_redir, write, target; ``""`` when the target is the next word)."""
    s = w.lstrip("0123456789")
    if s.startswith("&"):
        s = s[1:]
    if s.startswith(">>"):
        return True, True, s[2:]
    if s.startswith(">"):
        t = s[1:]
        if t.startswith("|"):
            t = t[1:]
        return True, True, t
    if s.startswith("<"):
        return True, False, s.lstrip("<")
    return False, False, ""


def _ignored_target(t: str) -> bool:
    """Redirections that write nothing to a file."""
    return t in ("/dev/null", "/dev/stdout", "/dev/stderr") or t.startswith("&")


def _base(p: str) -> str:
    """Go's ``path.Base``."""
    if p == "":
        return "."
    p = p.rstrip("/")
    if p == "":
        return "/"
    return p[p.rfind("/") + 1:]


_SHELLS = ("sh", "bash", "dash", "zsh")


def _classify_simple(all_words: List[str], depth: int) -> int:
    """Classify one simple command's words; ``depth`` bounds the recursion into ``sh -c``."""
    words: List[str] = []
    writes: List[str] = []
    i = 0
    while i < len(all_words):
        is_r, write, target = _redirect(all_words[i])
        if not is_r:
            words.append(all_words[i])
            i += 1
            continue
        if target == "" and i + 1 < len(all_words):
            i += 1
            target = all_words[i]
        if write and not _ignored_target(target):
            writes.append(target)
        i += 1
    words = _drop_prefixes(words)
    args: List[str] = []    # the arguments the path rule looks at
    if not words:
        k = _NONE
    else:
        prog = _base(words[0])
        if prog in _SHELLS and len(words) >= 3 and _is_dash_c(words[1]):
            if depth > 4:
                return _CHECKPOINT
            cmds = _split(words[2])
            if cmds is None:
                return _CHECKPOINT
            k = _NONE
            for c in cmds:
                k = max(k, _classify_simple(c, depth + 1))
        else:
            k, args = _program(prog, words[1:])
    if writes and k < _GIT:
        k = _GIT
    if k == _GIT:
        for a in args + writes:
            if _outside(a):
                return _CHECKPOINT
    return k


def _is_dash_c(w: str) -> bool:
    """``-c`` or a bundle of short options holding ``c`` (``-lc``, ``-ec``)."""
    return len(w) >= 2 and w[0] == "-" and w[1] != "-" and "c" in w[1:]


def _drop_prefixes(w: List[str]) -> List[str]:
    """Drop leading NAME=value words and wrappers with their options.

    When nothing follows a wrapper, the wrapper is the program.
    """
    while w and _is_assignment(w[0]):
        w = w[1:]
    while w:
        b = _base(w[0])
        if b == "sudo":
            rest = _skip_opts(w[1:], ("-u", "-g", "-C", "-D"))
        elif b == "env":
            rest = _skip_opts(w[1:], ("-u", "-C", "-S"))
            while rest and _is_assignment(rest[0]):
                rest = rest[1:]
        elif b == "nice":
            rest = _skip_opts(w[1:], ("-n",))
        elif b == "ionice":
            rest = _skip_opts(w[1:], ("-c", "-n", "-p"))
        elif b in ("nohup", "time", "command", "exec"):
            rest = _skip_opts(w[1:], ())
        elif b == "stdbuf":
            rest = _skip_opts(w[1:], ("-i", "-o", "-e"))
        elif b == "timeout":
            rest = _skip_opts(w[1:], ("-s", "-k"))
            if rest:
                rest = rest[1:]    # the duration
        elif b == "xargs":
            rest = _skip_opts(w[1:], ("-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a"))
        else:
            return w
        if not rest:
            return w[:1]
        w = rest
    return w


def _skip_opts(w: List[str], with_arg: Sequence[str]) -> List[str]:
    """Drop leading options; those in ``with_arg`` take the next word."""
    while w and w[0].startswith("-") and w[0] != "-":
        if w[0] == "--":
            return w[1:]
        if w[0] in with_arg and len(w) > 1:
            w = w[2:]
            continue
        w = w[1:]
    return w


def _is_assignment(w: str) -> bool:
    eq = w.find("=")
    if eq <= 0:
        return False
    for i, r in enumerate(w[:eq]):
        if not (r == "_" or "a" <= r <= "z" or "A" <= r <= "Z" or (i > 0 and "0" <= r <= "9")):
            return False
    return True


def _outside(p: str) -> bool:
    """The path rule: absolute (not under /tmp), ``~``, a ``..`` component, or a ``$``."""
    if "$" in p:
        return True
    dotdot = "/../" in "/" + p + "/"
    if p == "/tmp" or p.startswith("/tmp/"):
        return dotdot
    if p.startswith("/") or p.startswith("~"):
        return True
    return dotdot


def _non_options(args: List[str]) -> List[str]:
    return [a for a in args if not a.startswith("-")]


def _has(args: List[str], *opts: str) -> bool:
    return any(a in opts for a in args)


def _short_flag(args: List[str], c: str) -> bool:
    """Whether a short-option bundle (``-fdx``) among ``args`` holds ``c``."""
    return any(len(a) > 1 and a[0] == "-" and a[1] != "-" and c in a[1:] for a in args)


_READ_PROGRAMS = frozenset("""
ls cat head tail less more grep egrep fgrep rg ag wc echo printf pwd whoami id date which type file
stat du df ps uname hostname diff cmp sort uniq cut tr awk jq test [ true false sleep tree realpath
readlink dirname basename md5sum sha1sum sha256sum env printenv man free uptime nproc seq yes column
xxd od hexdump strings nl tac rev fold fmt paste join comm expr bc cd ping dig nslookup host
exit : export set unset wait read shift return umask alias
""".split())

_EDIT_PROGRAMS = frozenset("""
rm mv cp touch mkdir rmdir ln chmod chown tee truncate patch unzip tar gzip gunzip zip dd install
shred split csplit vi vim nano ed
""".split())

_FORK_PROGRAMS = frozenset("""
psql mysql mariadb mongo mongosh redis-cli pg_restore systemctl service supervisorctl kill pkill
killall reboot shutdown halt docker podman alembic flyway liquibase
""".split())

_GIT_READ = frozenset("""
status log diff show rev-parse ls-files ls-tree blame grep describe shortlog cat-file show-ref
for-each-ref name-rev rev-list count-objects help version --version fetch push
""".split())

# clone: a failed clone leaves a nested repository that the git rollback's
# clean (-fd, not -ff) does not remove.
_GIT_DESTROY = frozenset("gc prune filter-branch filter-repo submodule init clone".split())


def _program(prog: str, args: List[str]) -> Tuple[int, List[str]]:
    """Classify a program (base name) with its arguments.

    Returns the kind and the arguments the path rule then checks when the
    kind is ``git``.
    """
    ops = _non_options(args)
    sub = ops[0] if ops else ""
    if prog == "find":
        if _has(args, "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"):
            return _CHECKPOINT, []
        return _NONE, []
    if prog == "sed":
        for a in args:
            if a.startswith("--in-place") or (a.startswith("-") and not a.startswith("--") and "i" in a):
                return _GIT, ops[min(1, len(ops)):]
        return _NONE, []
    if prog == "curl":
        for i, a in enumerate(args):
            if a in ("-o", "--output"):
                if i + 1 < len(args):
                    return _GIT, [args[i + 1]]
                return _GIT, []
            if a in ("-O", "--remote-name", "--remote-name-all"):
                return _GIT, []
            if len(a) > 1 and a[0] == "-" and a[1] != "-" and ("o" in a[1:] or "O" in a[1:]):
                if "o" in a[1:] and i + 1 < len(args):
                    return _GIT, [args[i + 1]]
                return _GIT, []
        return _NONE, []
    if prog == "wget":
        paths: List[str] = []
        for i, a in enumerate(args):
            if a in ("-O", "--output-document") and i + 1 < len(args) and args[i + 1] == "-":
                return _NONE, []
            if a == "--output-document=-" or (a.endswith("O-") and a.startswith("-") and not a.startswith("--")):
                return _NONE, []
            if a in ("-O", "--output-document", "-P", "--directory-prefix") and i + 1 < len(args):
                paths.append(args[i + 1])
            elif a.startswith("--output-document=") or a.startswith("--directory-prefix="):
                paths.append(a[a.index("=") + 1:])
        return _GIT, paths
    if prog == "dd":
        return _GIT, [a[3:] for a in args if a.startswith("of=")]
    if prog in ("python", "python3", "node", "nodejs"):
        if args and args[0] in ("--version", "-V", "-v"):
            return _NONE, []
        if len(args) >= 2 and args[1] == "migrate" and _base(args[0]) == "manage.py":
            return _FORK, []
        return _CHECKPOINT, []
    if prog == "git":
        return _git_kind(args)
    if prog in ("rails", "rake"):
        return (_FORK if sub.startswith("db:") else _CHECKPOINT), []
    if prog == "npx":
        if len(ops) >= 2 and (
                (ops[0] == "prisma" and ops[1] == "migrate") or
                (ops[0] == "knex" and ops[1].startswith("migrate")) or
                (ops[0] == "sequelize" and ops[1] == "db:migrate")):
            return _FORK, []
        return _CHECKPOINT, []
    if prog == "prisma":
        return (_FORK if sub == "migrate" else _CHECKPOINT), []
    if prog == "knex":
        return (_FORK if sub.startswith("migrate") else _CHECKPOINT), []
    if prog == "sequelize":
        return (_FORK if sub == "db:migrate" else _CHECKPOINT), []
    if prog == "npm":
        if sub in ("ls", "list", "view", "outdated") or (_has(args, "--version", "-v") and len(args) == 1):
            return _NONE, []
        return _CHECKPOINT, []
    if prog in ("pip", "pip3"):
        if sub in ("list", "show", "freeze") or (len(args) == 1 and args[0] == "--version"):
            return _NONE, []
        return _CHECKPOINT, []
    if prog == "go":
        if sub == "env" and _has(args, "-w", "-u"):
            return _CHECKPOINT, []
        if sub in ("version", "env", "list", "vet"):
            return _NONE, []
        return _CHECKPOINT, []
    if prog == "cargo":
        if len(args) == 1 and args[0] == "--version":
            return _NONE, []
        return _CHECKPOINT, []
    if prog == "apt":
        return (_NONE if sub == "list" else _CHECKPOINT), []
    if prog == "apt-cache":
        return _NONE, []
    if prog == "pg_dump":
        for i, a in enumerate(args):
            if a in ("-f", "--file") and i + 1 < len(args):
                return _GIT, [args[i + 1]]
            if a.startswith("--file="):
                return _GIT, [a[len("--file="):]]
        return _NONE, []
    if prog == "dpkg":
        if _has(args, "-l", "-L", "-s", "--list", "--listfiles", "--status"):
            return _NONE, []
        return _CHECKPOINT, []
    if prog == "make":
        if _has(args, "-n", "--dry-run", "--just-print"):
            return _NONE, []
        return _CHECKPOINT, []
    if prog in _READ_PROGRAMS:
        return _NONE, []
    if prog in _EDIT_PROGRAMS:
        return _GIT, ops
    if prog in _FORK_PROGRAMS:
        return _FORK, []
    return _CHECKPOINT, []


def _git_kind(args: List[str]) -> Tuple[int, List[str]]:
    """Classify git by its subcommand, after git's global options."""
    while args and args[0].startswith("-"):
        a = args[0]
        if a in ("-C", "-c"):
            if len(args) < 2:
                return _NONE, []
            args = args[2:]
        elif a in ("--version", "--help"):
            return _NONE, []
        else:
            args = args[1:]
    if not args:
        return _NONE, []
    sub, rest = args[0], args[1:]
    ops = _non_options(rest)
    first = ops[0] if ops else ""
    if sub in _GIT_READ:
        return _NONE, []
    if sub in _GIT_DESTROY:
        return _CHECKPOINT, []
    if sub == "remote":
        if not rest or (_has(rest, "-v", "--verbose") and not ops) or first in ("show", "get-url"):
            return _NONE, []
    elif sub == "branch":
        if _has(rest, "-D", "-d", "--delete", "-m", "-M", "--move"):
            return _CHECKPOINT, []
        if not ops:
            return _NONE, []
    elif sub == "tag":
        if _has(rest, "-d", "--delete"):
            return _CHECKPOINT, []
        if not rest or _has(rest, "-l", "--list"):
            return _NONE, []
    elif sub == "config":
        if _has(rest, "--get", "--get-all", "--list", "-l", "--get-regexp"):
            return _NONE, []
        return _CHECKPOINT, []
    elif sub == "stash":
        if first in ("list", "show"):
            return _NONE, []
        if first in ("drop", "clear"):
            return _CHECKPOINT, []
    elif sub == "reflog":
        if first in ("", "show"):
            return _NONE, []
        if first in ("expire", "delete"):
            return _CHECKPOINT, []
    elif sub == "worktree":
        return (_NONE if first == "list" else _CHECKPOINT), []
    elif sub == "clean":
        if _short_flag(rest, "x") or _short_flag(rest, "X"):
            return _CHECKPOINT, []
    elif sub == "update-ref":
        if _has(rest, "-d"):
            return _CHECKPOINT, []
    return _GIT, []
