"""``checkpoint_for``: the lightest undo that covers a shell command (docs/undo.md).

Kinds, ordered: ``none < git < checkpoint < fork``. This is a convenience,
not a security boundary: it reads the text of a command, and a command can
do more than its text says.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

__all__ = ["NONE", "GIT", "CHECKPOINT", "FORK", "KINDS", "checkpoint_for", "max_kind"]

NONE = "none"
GIT = "git"
CHECKPOINT = "checkpoint"
FORK = "fork"
#: The undo kinds, lightest first.
KINDS = (NONE, GIT, CHECKPOINT, FORK)
_RANK = {k: i for i, k in enumerate(KINDS)}


def max_kind(*kinds: str) -> str:
    """The heaviest of ``kinds`` (``none`` for none)."""
    best = NONE
    for k in kinds:
        if _RANK[k] > _RANK[best]:
            best = k
    return best


class _Unparsable(Exception):
    """The line has a construct the parser does not follow: it is ``checkpoint``."""


# A simple command: its words, and its redirections (op, target).
_Simple = Tuple[List[str], List[Tuple[str, str]]]

_SEPARATORS = ";&|\n()"
_BLANKS = " \t\r"


def _split(line: str) -> List[_Simple]:
    """Split a command line into simple commands (words with quotes removed, redirections)."""
    cmds: List[_Simple] = []
    words: List[str] = []
    redirs: List[Tuple[str, str]] = []
    cur: List[str] = []
    in_word = False          # cur holds a word (possibly empty: "")
    pending_op: Optional[str] = None   # a redirection waiting for its target word
    cur_op: Optional[str] = None       # the redirection the current word is the target of
    i, n = 0, len(line)

    def end_word() -> None:
        nonlocal cur, in_word, pending_op, cur_op
        if not in_word:
            return
        w = "".join(cur)
        if cur_op is not None:
            redirs.append((cur_op, w))
            cur_op = None
        else:
            words.append(w)
        cur = []
        in_word = False

    def end_cmd() -> None:
        nonlocal words, redirs, pending_op
        end_word()
        if pending_op is not None:   # `echo >` with no target: sh refuses it; treat as unknown
            raise _Unparsable()
        if words or redirs:
            cmds.append((words, redirs))
        words, redirs = [], []

    def start_word() -> None:
        nonlocal in_word, pending_op, cur_op
        if not in_word:
            in_word = True
            if pending_op is not None:
                cur_op, pending_op = pending_op, None

    while i < n:
        c = line[i]
        if c == "\\":
            if i + 1 < n and line[i + 1] == "\n":   # line continuation
                i += 2
                continue
            start_word()
            if i + 1 < n:
                cur.append(line[i + 1])
            i += 2
            continue
        if c == "'":
            start_word()
            j = line.find("'", i + 1)
            if j < 0:
                raise _Unparsable()
            cur.append(line[i + 1:j])
            i = j + 1
            continue
        if c == '"':
            start_word()
            i += 1
            while True:
                if i >= n:
                    raise _Unparsable()
                d = line[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and line[i + 1] in '$`"\\\n':
                    if line[i + 1] != "\n":
                        cur.append(line[i + 1])
                    i += 2
                    continue
                if d == "`" or (d == "$" and i + 1 < n and line[i + 1] == "("):
                    raise _Unparsable()   # command substitution runs inside double quotes too
                cur.append(d)
                i += 1
            continue
        if c == "`" or (c == "$" and i + 1 < n and line[i + 1] == "("):
            raise _Unparsable()
        if c in "<>" and i + 1 < n and line[i + 1] == "(":
            raise _Unparsable()      # process substitution
        if c == "#" and not in_word:
            j = line.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in _BLANKS:
            end_word()
            i += 1
            continue
        if c in "<>" or (c == "&" and i + 1 < n and line[i + 1] == ">"):
            # A redirection: [N]> [N]>> >| &> &>> < << <<< <> >& <&
            fd = ""
            if in_word and cur_op is None and cur and all(ch.isdigit() for ch in cur):
                fd = "".join(cur)
                cur, in_word = [], False
            else:
                end_word()
            j = i
            if c == "&":
                j += 1
            while j < n and line[j] in "<>":
                j += 1
            op = line[i:j]
            if j < n and line[j] == "|" and op.endswith(">"):
                j += 1
            elif j < n and line[j] == "&" and c != "&":
                j += 1      # >&N, <&N: duplicate a descriptor
                op = line[i:j]
            if pending_op is not None:
                raise _Unparsable()
            pending_op = fd + op
            i = j
            continue
        if c in _SEPARATORS:
            end_cmd()
            i += 1
            continue
        start_word()
        cur.append(c)
        i += 1
    end_cmd()
    return cmds


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_IGNORED_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr", "&1", "&2", "-", "&-"}


def _bad_path(p: str) -> bool:
    """True when a path is outside the working tree: absolute (not under /tmp), ~, .., or $-expanded."""
    if not p:
        return False
    if p.startswith("~") or p.startswith("$"):
        return True
    if ".." in p.split("/"):
        return True
    if p.startswith("/"):
        return not (p == "/tmp" or p.startswith("/tmp/"))
    return False


_NONE_PROGRAMS = set("""
ls cat head tail less more grep egrep fgrep rg ag wc echo printf pwd whoami id date which type file
stat du df ps uname hostname diff cmp sort uniq cut tr awk jq test [ true false sleep tree realpath
readlink dirname basename md5sum sha1sum sha256sum env printenv man free uptime nproc seq yes column
xxd od hexdump strings nl tac rev fold fmt paste join comm expr bc cd ping dig nslookup host
exit : export set unset wait read shift return umask alias
""".split())

_GIT_PROGRAMS = set("""
rm mv cp touch mkdir rmdir ln chmod chown tee truncate patch unzip tar gzip gunzip zip dd install
shred split csplit vi vim nano ed
""".split())

_FORK_PROGRAMS = set("""
psql mysql mariadb mongo mongosh redis-cli pg_restore systemctl service supervisorctl kill pkill
killall reboot shutdown halt docker podman alembic flyway liquibase
""".split())

_SHELLS = {"sh", "bash", "dash", "zsh"}

_GIT_NONE = set("""
status log diff show rev-parse ls-files ls-tree blame grep describe shortlog cat-file show-ref
for-each-ref name-rev rev-list count-objects help version --version fetch push
""".split())

_GIT_CHECKPOINT = {"gc", "prune", "filter-branch", "filter-repo", "submodule", "init"}


def _dequote_prefix(words: List[str]) -> Tuple[List[str], Optional[str]]:
    """Drop assignments and wrappers. Returns (words from the program on, or a ``sh -c`` script)."""
    w = list(words)
    while w and _ASSIGN.match(w[0]):
        w.pop(0)
    changed = True
    while changed and w:
        changed = False
        prog = w[0].rsplit("/", 1)[-1]
        if prog in ("!", "{", "}", "if", "then", "else", "elif", "while", "until", "do"):
            w.pop(0)
            changed = True
        elif prog == "sudo":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o == "--":
                    break
                if o in ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R"):
                    if w:
                        w.pop(0)
            while w and _ASSIGN.match(w[0]):
                w.pop(0)
            changed = True
        elif prog == "env":
            rest = w[1:]
            while rest and (rest[0].startswith("-") or _ASSIGN.match(rest[0])):
                o = rest.pop(0)
                if o == "--":
                    break
                if o in ("-u", "-C", "-S", "--unset", "--chdir", "--split-string") and rest:
                    rest.pop(0)
            if not rest:
                return ["env"], None      # env with no command: prints the environment
            w = rest
            changed = True
        elif prog == "nice":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o == "-n" and w:
                    w.pop(0)
            changed = True
        elif prog in ("nohup", "time", "exec", "command"):
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if prog == "command" and o in ("-v", "-V"):
                    return ["type"], None   # a lookup
                if prog == "exec" and o == "-a" and w:
                    w.pop(0)
            changed = True
        elif prog == "timeout":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o in ("-s", "-k", "--signal", "--kill-after") and w:
                    w.pop(0)
            if w:
                w.pop(0)    # the duration
            changed = True
        elif prog == "stdbuf":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o in ("-i", "-o", "-e") and w:
                    w.pop(0)
            changed = True
        elif prog == "ionice":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o in ("-c", "-n", "-p", "-P", "-u") and w:
                    w.pop(0)
            changed = True
        elif prog == "xargs":
            w.pop(0)
            while w and w[0].startswith("-"):
                o = w.pop(0)
                if o in ("-n", "-I", "-L", "-P", "-d", "-E", "-s", "-a", "-i", "-l", "-e") and len(o) == 2 and w:
                    if o not in ("-i", "-l", "-e"):
                        w.pop(0)
            if not w:
                return ["echo"], None   # xargs with no command runs echo
            changed = True
        elif prog in _SHELLS:
            rest = w[1:]
            script_flag = False
            while rest and rest[0].startswith("-") and rest[0] != "-":
                o = rest.pop(0)
                if o == "--":
                    break
                if o in ("-o", "+o", "-O", "+O") and rest:
                    rest.pop(0)
                    continue
                if not o.startswith("--") and "c" in o[1:]:
                    script_flag = True
            if script_flag and rest:
                return [], rest[0]
            return w, None
    return w, None


def _git_kind(args: List[str]) -> Tuple[str, List[str]]:
    """Classify ``git ARGS``; returns (kind, the arguments after the subcommand)."""
    a = list(args)
    while a and a[0].startswith("-"):
        o = a.pop(0)
        if o in ("--version", "-v", "--help", "-h"):
            return NONE, []
        if o in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env") and a:
            a.pop(0)
    if not a:
        return NONE, []
    sub, rest = a[0], a[1:]
    opts = [x for x in rest if x.startswith("-")]
    pos = [x for x in rest if not x.startswith("-")]
    short = "".join(x[1:] for x in opts if not x.startswith("--"))
    if sub in _GIT_NONE:
        return NONE, []
    if sub in _GIT_CHECKPOINT:
        return CHECKPOINT, []
    if sub == "clone":
        return GIT, pos      # the path rule looks at its repository and destination
    if sub == "remote":
        if not rest or rest == ["-v"] or rest == ["--verbose"] or (pos and pos[0] in ("show", "get-url")):
            return NONE, []
        return GIT, []
    if sub == "branch":
        if any(x in ("--delete", "--move") for x in opts) or any(ch in short for ch in "dDmM"):
            return CHECKPOINT, []
        listing = {"-a", "-r", "-v", "-vv", "--list", "-l", "--show-current", "--all", "--remotes",
                   "--verbose"}
        if all(x in listing for x in rest) or "--list" in opts or "-l" in opts:
            return NONE, []
        return GIT, []
    if sub == "tag":
        if any(x in ("-d", "--delete") for x in opts):
            return CHECKPOINT, []
        if not rest or any(x in ("-l", "--list") for x in opts):
            return NONE, []
        return GIT, []
    if sub == "config":
        if any(x in ("--get", "--get-all", "--get-regexp", "--list", "-l") for x in opts):
            return NONE, []
        return CHECKPOINT, []
    if sub == "stash":
        if pos and pos[0] in ("list", "show"):
            return NONE, []
        if pos and pos[0] in ("drop", "clear"):
            return CHECKPOINT, []
        return GIT, []
    if sub == "reflog":
        if pos and pos[0] in ("expire", "delete"):
            return CHECKPOINT, []
        return NONE, []
    if sub == "worktree":
        return (NONE if pos and pos[0] == "list" else CHECKPOINT), []
    if sub == "clean":
        if "x" in short or "X" in short:
            return CHECKPOINT, []
        return GIT, []
    if sub == "update-ref":
        return (CHECKPOINT if "-d" in opts else GIT), []
    return GIT, []


def _path_args(args: List[str]) -> List[str]:
    """Arguments the path rule looks at: non-options, and values of ``--opt=value``."""
    out = []
    for x in args:
        if x.startswith("--") and "=" in x:
            out.append(x.split("=", 1)[1])
        elif not x.startswith("-"):
            out.append(x)
    return out


_MIGRATE_PREFIXES = ("db:",)


def _program_kind(words: List[str]) -> Tuple[str, List[str]]:
    """Classify a program and its arguments. Returns (kind, arguments to check with the path rule).

    The path arguments are returned only for kind ``git``.
    """
    prog = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    pos = [x for x in args if not x.startswith("-")]

    # fork: database migrations first (python manage.py migrate is not "python").
    if prog in ("python", "python3") and len(args) >= 2 and args[0].endswith("manage.py") and args[1] == "migrate":
        return FORK, []
    if prog in ("rails", "rake") and pos and pos[0].startswith("db:"):
        return FORK, []
    if prog == "npx" and len(pos) >= 2 and (
            (pos[0] == "prisma" and pos[1] == "migrate") or
            (pos[0] == "knex" and pos[1].startswith("migrate")) or
            (pos[0] == "sequelize" and pos[1] == "db:migrate")):
        return FORK, []
    if prog == "prisma" and pos and pos[0] == "migrate":
        return FORK, []
    if prog == "knex" and pos and pos[0].startswith("migrate"):
        return FORK, []
    if prog == "sequelize" and pos and pos[0] == "db:migrate":
        return FORK, []
    if prog in _FORK_PROGRAMS:
        return FORK, []

    # none, with their special cases
    if prog == "find":
        if any(x in ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fls") or x.startswith("-fprint")
               for x in args):
            return CHECKPOINT, []
        return NONE, []
    if prog == "sed":
        inplace = False
        script_given = False
        rest: List[str] = []
        k = 0
        while k < len(args):
            x = args[k]
            if x.startswith("--in-place"):
                inplace = True
            elif x in ("-e", "--expression", "-f", "--file"):
                script_given = True
                k += 1
            elif x.startswith("--expression=") or x.startswith("--file="):
                script_given = True
            elif x.startswith("-") and not x.startswith("--") and len(x) > 1:
                flags = x[1:]
                for idx, ch in enumerate(flags):
                    if ch == "i":
                        inplace = True
                        break
                    if ch in "ef":
                        script_given = True
                        if idx == len(flags) - 1:
                            k += 1
                        break
                    if ch not in "nErsuz":
                        break
            else:
                rest.append(x)
            k += 1
        if not inplace:
            return NONE, []
        files = rest if script_given else rest[1:]
        return GIT, files
    if prog == "curl":
        targets: List[str] = []
        writes = False
        k = 0
        while k < len(args):
            x = args[k]
            if x in ("--output", "-o"):
                writes = True
                if k + 1 < len(args):
                    targets.append(args[k + 1])
                k += 2
                continue
            if x.startswith("--output="):
                writes = True
                targets.append(x.split("=", 1)[1])
            elif x in ("--remote-name", "--remote-name-all"):
                writes = True
            elif x.startswith("-") and not x.startswith("--") and len(x) > 1:
                flags = x[1:]
                for idx, ch in enumerate(flags):
                    if ch == "O":
                        writes = True
                    elif ch == "o":
                        writes = True
                        val = flags[idx + 1:]
                        if val:
                            targets.append(val)
                        elif k + 1 < len(args):
                            targets.append(args[k + 1])
                            k += 1
                        break
                    elif ch in "dHXuAebcFTxmrwKECYyzUPQtD":
                        if idx == len(flags) - 1:
                            k += 1   # the option's value is the next word
                        break
            k += 1
        targets = [t for t in targets if t != "-"]
        if not writes or (not targets and not any(
                x in ("--remote-name", "--remote-name-all") or
                (x.startswith("-") and not x.startswith("--") and "O" in x) for x in args)):
            return NONE, []
        return GIT, targets
    if prog == "wget":
        targets = []
        to_stdout = False
        k = 0
        while k < len(args):
            x = args[k]
            val: Optional[str] = None
            if x in ("-O", "--output-document", "-P", "--directory-prefix"):
                val = args[k + 1] if k + 1 < len(args) else None
                k += 1
            elif x.startswith("--output-document=") or x.startswith("--directory-prefix="):
                val = x.split("=", 1)[1]
            elif x.startswith("-") and not x.startswith("--") and ("O" in x[1:] or "P" in x[1:]):
                flags = x[1:]
                idx = min(i for i in (flags.find("O"), flags.find("P")) if i >= 0)
                val = flags[idx + 1:]
                if not val:
                    val = args[k + 1] if k + 1 < len(args) else None
                    k += 1
            if val is not None:
                if val == "-":
                    to_stdout = True
                else:
                    targets.append(val)
            k += 1
        if to_stdout and not targets:
            return NONE, []
        return GIT, targets
    if prog in ("python", "python3", "node"):
        if args and all(x in ("--version", "-V", "-v") for x in args):
            return NONE, []
        return CHECKPOINT, []
    if prog in _NONE_PROGRAMS:
        return NONE, []

    # git programs and git itself
    if prog in _GIT_PROGRAMS:
        if prog == "dd":
            return GIT, [x.split("=", 1)[1] for x in args if x.startswith("of=")]
        return GIT, _path_args(args)
    if prog == "git":
        # Path arguments: only git clone's (docs/undo.md step 5).
        return _git_kind(args)

    # checkpoint programs, with their read-only exceptions
    sub = pos[0] if pos else ""
    if prog == "npm" and (sub in ("ls", "list", "view", "outdated") or args in (["--version"], ["-v"])):
        return NONE, []
    if prog in ("pip", "pip3") and (sub in ("list", "show", "freeze") or args in (["--version"], ["-V"])):
        return NONE, []
    if prog == "go" and sub in ("version", "env", "list", "vet"):
        return NONE, []
    if prog == "cargo" and args in (["--version"], ["-V"]):
        return NONE, []
    if prog == "apt" and sub == "list":
        return NONE, []
    if prog == "apt-cache":
        return NONE, []
    if prog == "dpkg" and args and args[0] in ("-l", "-L", "-s", "--list", "--listfiles", "--status"):
        return NONE, []
    if prog == "make" and any(x in ("-n", "--dry-run", "--just-print", "--recon") for x in args):
        return NONE, []
    if prog == "pg_dump" and not any(x in ("-f", "--file") or x.startswith("--file=") or
                                     (x.startswith("-f") and not x.startswith("--")) for x in args):
        return NONE, []
    return CHECKPOINT, []


def _classify_simple(words: List[str], redirs: List[Tuple[str, str]], depth: int) -> str:
    kind = NONE
    for op, target in redirs:
        if ">" not in op:
            continue       # a read (or a here-document)
        if target in _IGNORED_TARGETS or target.startswith("&"):
            continue
        if op.endswith("&") and (target.isdigit() or target == "-"):
            continue       # >&2: to another descriptor
        kind = max_kind(kind, CHECKPOINT if _bad_path(target) else GIT)
    w, script = _dequote_prefix(words)
    if script is not None:
        return max_kind(kind, _classify(script, depth + 1))
    if not w:
        return kind
    pk, paths = _program_kind(w)
    if pk == GIT and any(_bad_path(p) for p in paths):
        pk = CHECKPOINT
    return max_kind(kind, pk)


def _classify(line: str, depth: int) -> str:
    if depth > 8:
        return CHECKPOINT
    try:
        cmds = _split(line)
    except _Unparsable:
        return CHECKPOINT
    kind = NONE
    for words, redirs in cmds:
        kind = max_kind(kind, _classify_simple(words, redirs, depth))
        if kind == FORK:
            break
    return kind


def checkpoint_for(command: str) -> str:
    """Classify a shell command line by the lightest undo that covers what it can break.

    Returns ``"none"`` (reads), ``"git"`` (working-tree edits a repository
    snapshot undoes), ``"checkpoint"`` (system changes, untracked or
    outside paths, unknown programs: a disk checkpoint undoes them) or
    ``"fork"`` (running processes and servers' state: a live copy). A line
    gets the heaviest kind of its parts. The algorithm and tables are
    those of docs/undo.md; this is a convenience, not a security boundary.
    """
    return _classify(command, 0)
