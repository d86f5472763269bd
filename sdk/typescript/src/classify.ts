/**
 * `checkpointFor`: classifies a shell command line by the lightest undo
 * that covers what it can break (docs/undo.md). A port of the Go reference
 * (`undo/classify.go`), function for function (same splitting, same
 * redirection parsing, same tables, same special cases), so that the SDKs
 * agree on every input, not only on sdk/testdata/checkpoint_for.json.
 * Change the three together.
 *
 * A convenience, not a security boundary: it reads the text of a command,
 * and a command can do more than its text says. The sandbox is the boundary.
 *
 * @module
 */
import type { UndoKind } from './types.js';

const NONE = 0, GIT = 1, CHECKPOINT = 2, FORK = 3;
const NAMES: UndoKind[] = ['none', 'git', 'checkpoint', 'fork'];

type Kind = number;

/** Splits a line into simple commands of words (quotes removed); null when the parser does not follow it. */
function split(line: string): string[][] | null {
  const cmds: string[][] = [];
  let words: string[] = [];
  let cur = '';
  let inWord = false;
  const endWord = () => {
    if (inWord) {
      words.push(cur);
      cur = '';
      inWord = false;
    }
  };
  const endCmd = () => {
    endWord();
    if (words.length > 0) cmds.push(words);
    words = [];
  };
  const n = line.length;
  for (let i = 0; i < n; i++) {
    const c = line[i];
    if (c === '\\') {
      if (i + 1 < n) {
        i++;
        if (line[i] !== '\n') {
          cur += line[i];
          inWord = true;
        }
      }
    } else if (c === "'") {
      const j = line.indexOf("'", i + 1);
      if (j < 0) return null;
      cur += line.slice(i + 1, j);
      inWord = true;
      i = j;
    } else if (c === '"') {
      i++;
      for (; i < n && line[i] !== '"'; i++) {
        if (line[i] === '\\' && i + 1 < n && '"\\$`'.includes(line[i + 1])) {
          i++;
          cur += line[i];
        } else if (line[i] === '`' || (line[i] === '$' && i + 1 < n && line[i + 1] === '(')) {
          return null;
        } else {
          cur += line[i];
        }
      }
      if (i >= n) return null;
      inWord = true;
    } else if (c === '`') {
      return null;
    } else if (c === '$' && i + 1 < n && line[i + 1] === '(') {
      return null;
    } else if ((c === '<' || c === '>') && i + 1 < n && line[i + 1] === '(') {
      return null;
    } else if (c === ';' || c === '\n' || c === '|') {
      endCmd();
      if (c === '|' && i + 1 < n && line[i + 1] === '|') i++;
    } else if (c === '&') {
      if (i + 1 < n && line[i + 1] === '&') {
        endCmd();
        i++;
      } else if (i + 1 < n && line[i + 1] === '>') {
        cur += c; // &> redirection: part of a word
        inWord = true;
      } else if (inWord && cur.endsWith('>')) {
        cur += c; // 2>&1
      } else {
        endCmd();
      }
    } else if (c === ' ' || c === '\t') {
      endWord();
    } else if (c === '>' || c === '<') {
      // A redirection starts a word of its own unless it follows digits (2>) or & (&>) of the same word.
      if (inWord && !isRedirPrefix(cur)) endWord();
      cur += c;
      inWord = true;
    } else {
      cur += c;
      inWord = true;
    }
  }
  endCmd();
  return cmds;
}

function isRedirPrefix(s: string): boolean {
  if (s === '&' || s.endsWith('>') || s.endsWith('<')) return true;
  return /^[0-9]+$/.test(s);
}

/** A redirection word: [isRedir, write, target ('' when it is the next word)]. */
function redirect(w: string): [boolean, boolean, string] {
  let s = w.replace(/^[0-9]+/, '');
  if (s.startsWith('&')) s = s.slice(1);
  if (s.startsWith('>>')) return [true, true, s.slice(2)];
  if (s.startsWith('>')) return [true, true, s.slice(1).replace(/^\|/, '')];
  if (s.startsWith('<')) return [true, false, s.replace(/^<+/, '')];
  return [false, false, ''];
}

function ignoredTarget(t: string): boolean {
  return t === '/dev/null' || t === '/dev/stdout' || t === '/dev/stderr' || t.startsWith('&');
}

function baseName(p: string): string {
  // Like Go's path.Base.
  if (p === '') return '.';
  p = p.replace(/\/+$/, '');
  if (p === '') return '/';
  const i = p.lastIndexOf('/');
  return i >= 0 ? p.slice(i + 1) : p;
}

const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh']);

function classifySimple(all: string[], depth: number): Kind {
  const words: string[] = [];
  const writes: string[] = [];
  for (let i = 0; i < all.length; i++) {
    const [isR, write, t] = redirect(all[i]);
    if (!isR) {
      words.push(all[i]);
      continue;
    }
    let target = t;
    if (target === '' && i + 1 < all.length) {
      i++;
      target = all[i];
    }
    if (write && !ignoredTarget(target)) writes.push(target);
  }
  const w = dropPrefixes(words);
  let k: Kind;
  let args: string[] = [];
  if (w.length === 0) {
    k = NONE;
  } else {
    const prog = baseName(w[0]);
    if (SHELLS.has(prog) && w.length >= 3 && isDashC(w[1])) {
      if (depth > 4) return CHECKPOINT;
      const cmds = split(w[2]);
      if (cmds === null) return CHECKPOINT;
      k = NONE;
      for (const c of cmds) k = Math.max(k, classifySimple(c, depth + 1));
    } else {
      [k, args] = program(prog, w.slice(1));
    }
  }
  if (writes.length > 0 && k < GIT) k = GIT;
  if (k === GIT) {
    for (const a of [...args, ...writes]) if (outside(a)) return CHECKPOINT;
  }
  return k;
}

/** `-c` or a bundle of short options holding `c` (`-lc`, `-ec`): the shell's next word is the command line. */
function isDashC(w: string): boolean {
  return w.length >= 2 && w[0] === '-' && w[1] !== '-' && w.slice(1).includes('c');
}

/** Drops leading NAME=value words and wrappers with their options; a wrapper with nothing after it is the program. */
function dropPrefixes(w: string[]): string[] {
  while (w.length > 0 && isAssignment(w[0])) w = w.slice(1);
  while (w.length > 0) {
    let rest: string[];
    switch (baseName(w[0])) {
      case 'sudo': rest = skipOpts(w.slice(1), ['-u', '-g', '-C', '-D']); break;
      case 'env':
        rest = skipOpts(w.slice(1), ['-u', '-C', '-S']);
        while (rest.length > 0 && isAssignment(rest[0])) rest = rest.slice(1);
        break;
      case 'nice': rest = skipOpts(w.slice(1), ['-n']); break;
      case 'ionice': rest = skipOpts(w.slice(1), ['-c', '-n', '-p']); break;
      case 'nohup': case 'time': case 'command': case 'exec': rest = skipOpts(w.slice(1), []); break;
      case 'stdbuf': rest = skipOpts(w.slice(1), ['-i', '-o', '-e']); break;
      case 'timeout':
        rest = skipOpts(w.slice(1), ['-s', '-k']);
        if (rest.length > 0) rest = rest.slice(1); // the duration
        break;
      case 'xargs': rest = skipOpts(w.slice(1), ['-I', '-n', '-P', '-d', '-L', '-s', '-E', '-a']); break;
      default: return w;
    }
    if (rest.length === 0) return w.slice(0, 1);
    w = rest;
  }
  return w;
}

function skipOpts(w: string[], withArg: string[]): string[] {
  while (w.length > 0 && w[0].startsWith('-') && w[0] !== '-') {
    if (w[0] === '--') return w.slice(1);
    if (withArg.includes(w[0]) && w.length > 1) {
      w = w.slice(2);
      continue;
    }
    w = w.slice(1);
  }
  return w;
}

function isAssignment(w: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_]*=/.test(w);
}

/** The path rule: absolute (not under /tmp), `~`, or a `..` component. */
function outside(p: string): boolean {
  if (p.includes('$')) return true;
  const dotdot = ('/' + p + '/').includes('/../');
  if (p === '/tmp' || p.startsWith('/tmp/')) return dotdot;
  if (p.startsWith('/') || p.startsWith('~')) return true;
  return dotdot;
}

const nonOptions = (args: string[]) => args.filter((a) => !a.startsWith('-'));
const has = (args: string[], ...opts: string[]) => args.some((a) => opts.includes(a));
const shortFlag = (args: string[], c: string) => args.some((a) => a.length > 1 && a[0] === '-' && a[1] !== '-' && a.slice(1).includes(c));
const set = (s: string) => new Set(s.split(' '));

const readPrograms = set('ls cat head tail less more grep egrep fgrep rg ag wc echo printf pwd whoami id date which type file stat du df ' +
  'ps uname hostname diff cmp sort uniq cut tr awk jq test [ true false sleep tree realpath readlink dirname basename md5sum sha1sum ' +
  'sha256sum env printenv man free uptime nproc seq yes column xxd od hexdump strings nl tac rev fold fmt paste join comm expr ' +
  'bc cd ping dig nslookup host exit : export set unset wait read shift return umask alias');
const editPrograms = set('rm mv cp touch mkdir rmdir ln chmod chown tee truncate patch unzip tar gzip gunzip zip dd install shred split ' +
  'csplit vi vim nano ed');
const forkPrograms = set('psql mysql mariadb mongo mongosh redis-cli pg_restore systemctl service supervisorctl kill pkill killall ' +
  'reboot shutdown halt docker podman alembic flyway liquibase');
const gitRead = set('status log diff show rev-parse ls-files ls-tree blame grep describe shortlog cat-file show-ref for-each-ref ' +
  'name-rev rev-list count-objects help version --version fetch push');
// clone: a failed clone leaves a nested repository that the git rollback's clean (-fd, not -ff) does not remove.
const gitDestroy = set('gc prune filter-branch filter-repo submodule init clone');

/** Classifies a program (base name) with its arguments; the list is what the path rule checks for `git`. */
function program(prog: string, args: string[]): [Kind, string[]] {
  const ops = nonOptions(args);
  const sub = ops.length > 0 ? ops[0] : '';
  switch (prog) {
    case 'find':
      return has(args, '-delete', '-exec', '-execdir', '-ok', '-okdir', '-fprint', '-fprint0', '-fprintf', '-fls') ? [CHECKPOINT, []] : [NONE, []];
    case 'sed':
      for (const a of args) {
        if (a.startsWith('--in-place') || (a.startsWith('-') && !a.startsWith('--') && a.includes('i'))) return [GIT, ops.slice(Math.min(1, ops.length))];
      }
      return [NONE, []];
    case 'curl':
      for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if (a === '-o' || a === '--output') return [GIT, i + 1 < args.length ? [args[i + 1]] : []];
        if (a === '-O' || a === '--remote-name' || a === '--remote-name-all') return [GIT, []];
        if (a.length > 1 && a[0] === '-' && a[1] !== '-' && /[oO]/.test(a.slice(1))) {
          if (a.slice(1).includes('o') && i + 1 < args.length) return [GIT, [args[i + 1]]];
          return [GIT, []];
        }
      }
      return [NONE, []];
    case 'wget': {
      const paths: string[] = [];
      for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if ((a === '-O' || a === '--output-document') && i + 1 < args.length && args[i + 1] === '-') return [NONE, []];
        if (a === '--output-document=-' || (a.endsWith('O-') && a.startsWith('-') && !a.startsWith('--'))) return [NONE, []];
        if ((a === '-O' || a === '--output-document' || a === '-P' || a === '--directory-prefix') && i + 1 < args.length) {
          paths.push(args[i + 1]);
        } else if (a.startsWith('--output-document=') || a.startsWith('--directory-prefix=')) {
          paths.push(a.slice(a.indexOf('=') + 1));
        }
      }
      return [GIT, paths];
    }
    case 'dd':
      return [GIT, args.filter((a) => a.startsWith('of=')).map((a) => a.slice(3))];
    case 'python': case 'python3': case 'node': case 'nodejs':
      if (args.length > 0 && (args[0] === '--version' || args[0] === '-V' || args[0] === '-v')) return [NONE, []];
      if (args.length >= 2 && args[1] === 'migrate' && baseName(args[0]) === 'manage.py') return [FORK, []];
      return [CHECKPOINT, []];
    case 'git':
      return gitKind(args);
    case 'rails': case 'rake':
      return sub.startsWith('db:') ? [FORK, []] : [CHECKPOINT, []];
    case 'npx':
      if ((ops.length >= 2 && ops[0] === 'prisma' && ops[1] === 'migrate') ||
        (ops.length >= 2 && ops[0] === 'knex' && ops[1].startsWith('migrate')) ||
        (ops.length >= 2 && ops[0] === 'sequelize' && ops[1] === 'db:migrate')) return [FORK, []];
      return [CHECKPOINT, []];
    case 'prisma':
      return sub === 'migrate' ? [FORK, []] : [CHECKPOINT, []];
    case 'knex':
      return sub.startsWith('migrate') ? [FORK, []] : [CHECKPOINT, []];
    case 'sequelize':
      return sub === 'db:migrate' ? [FORK, []] : [CHECKPOINT, []];
    case 'npm':
      if (sub === 'ls' || sub === 'list' || sub === 'view' || sub === 'outdated' || (has(args, '--version', '-v') && args.length === 1)) return [NONE, []];
      return [CHECKPOINT, []];
    case 'pip': case 'pip3':
      if (sub === 'list' || sub === 'show' || sub === 'freeze' || (args.length === 1 && args[0] === '--version')) return [NONE, []];
      return [CHECKPOINT, []];
    case 'go':
      if (sub === 'env' && has(args, '-w', '-u')) return [CHECKPOINT, []];
      return sub === 'version' || sub === 'env' || sub === 'list' || sub === 'vet' ? [NONE, []] : [CHECKPOINT, []];
    case 'cargo':
      return args.length === 1 && args[0] === '--version' ? [NONE, []] : [CHECKPOINT, []];
    case 'apt':
      return sub === 'list' ? [NONE, []] : [CHECKPOINT, []];
    case 'apt-cache':
      return [NONE, []];
    case 'pg_dump':
      for (let i = 0; i < args.length; i++) {
        const a = args[i];
        if ((a === '-f' || a === '--file') && i + 1 < args.length) return [GIT, [args[i + 1]]];
        if (a.startsWith('--file=')) return [GIT, [a.slice('--file='.length)]];
      }
      return [NONE, []];
    case 'dpkg':
      return has(args, '-l', '-L', '-s', '--list', '--listfiles', '--status') ? [NONE, []] : [CHECKPOINT, []];
    case 'make':
      return has(args, '-n', '--dry-run', '--just-print') ? [NONE, []] : [CHECKPOINT, []];
  }
  if (readPrograms.has(prog)) return [NONE, []];
  if (editPrograms.has(prog)) return [GIT, ops];
  if (forkPrograms.has(prog)) return [FORK, []];
  return [CHECKPOINT, []];
}

function gitKind(args: string[]): [Kind, string[]] {
  while (args.length > 0 && args[0].startsWith('-')) {
    const a = args[0];
    if (a === '-C' || a === '-c') {
      if (args.length < 2) return [NONE, []];
      args = args.slice(2);
    } else if (a === '--version' || a === '--help') {
      return [NONE, []];
    } else {
      args = args.slice(1);
    }
  }
  if (args.length === 0) return [NONE, []];
  const sub = args[0];
  const rest = args.slice(1);
  const ops = nonOptions(rest);
  const first = ops.length > 0 ? ops[0] : '';
  if (gitRead.has(sub)) return [NONE, []];
  if (gitDestroy.has(sub)) return [CHECKPOINT, []];
  switch (sub) {
    case 'remote':
      if (rest.length === 0 || (has(rest, '-v', '--verbose') && ops.length === 0) || first === 'show' || first === 'get-url') return [NONE, []];
      break;
    case 'branch':
      if (has(rest, '-D', '-d', '--delete', '-m', '-M', '--move')) return [CHECKPOINT, []];
      if (ops.length === 0) return [NONE, []];
      break;
    case 'tag':
      if (has(rest, '-d', '--delete')) return [CHECKPOINT, []];
      if (rest.length === 0 || has(rest, '-l', '--list')) return [NONE, []];
      break;
    case 'config':
      if (has(rest, '--get', '--get-all', '--list', '-l', '--get-regexp')) return [NONE, []];
      return [CHECKPOINT, []];
    case 'stash':
      if (first === 'list' || first === 'show') return [NONE, []];
      if (first === 'drop' || first === 'clear') return [CHECKPOINT, []];
      break;
    case 'reflog':
      if (first === '' || first === 'show') return [NONE, []];
      if (first === 'expire' || first === 'delete') return [CHECKPOINT, []];
      break;
    case 'worktree':
      return first === 'list' ? [NONE, []] : [CHECKPOINT, []];
    case 'clean':
      if (shortFlag(rest, 'x') || shortFlag(rest, 'X')) return [CHECKPOINT, []];
      break;
    case 'update-ref':
      if (has(rest, '-d')) return [CHECKPOINT, []];
      break;
  }
  return [GIT, []];
}

/**
 * Classifies a shell command line (as run by `sh -c`) by the lightest undo
 * that covers what it can break: `none` (reads) < `git` (working-tree
 * edits) < `checkpoint` (system changes, unknown programs) < `fork`
 * (running processes, servers). A line gets the highest kind of its parts;
 * command or process substitution and unterminated quotes make it
 * `checkpoint`. See docs/undo.md.
 */
export function checkpointFor(command: string): UndoKind {
  const cmds = split(command);
  if (cmds === null) return 'checkpoint';
  let k: Kind = NONE;
  for (const words of cmds) k = Math.max(k, classifySimple(words, 0));
  return NAMES[k];
}
