/**
 * `checkpointFor`: classifies a shell command line by the lightest undo
 * that covers what it can break (docs/undo.md). A convenience, not a
 * security boundary: a command can do more than its text says.
 *
 * @module
 */
import type { UndoKind } from './types.js';

const ORDER: UndoKind[] = ['none', 'git', 'checkpoint', 'fork'];
const rank = (k: UndoKind) => ORDER.indexOf(k);
const max = (a: UndoKind, b: UndoKind): UndoKind => (rank(a) >= rank(b) ? a : b);

/** A word after quote removal; `lit` is how many of its first characters were unquoted. */
interface Word { text: string; lit: number }

class Complex extends Error {}

/** Splits a line into simple commands of words (step 1 and 2 of the algorithm). */
function splitLine(line: string): Word[][] {
  const cmds: Word[][] = [];
  let cur: Word[] = [];
  let word = '';
  let inWord = false;
  let allLit = true;
  let lit = 0;
  const endWord = () => {
    if (inWord) cur.push({ text: word, lit: allLit ? word.length : lit });
    word = '';
    inWord = false;
    allLit = true;
    lit = 0;
  };
  const endCmd = () => {
    endWord();
    cmds.push(cur);
    cur = [];
  };
  const addLit = (c: string) => {
    word += c;
    inWord = true;
    if (allLit) lit = word.length;
  };
  const addQuoted = (s: string) => {
    if (allLit) {
      lit = word.length;
      allLit = false;
    }
    word += s;
    inWord = true;
  };
  const isRedirPrefix = () => allLit && /^(\d*|&)[<>]*$/.test(word) && /[<>]$|^\d*$|^&$/.test(word);
  const n = line.length;
  let i = 0;
  while (i < n) {
    const c = line[i];
    const next = i + 1 < n ? line[i + 1] : '';
    if (c === '\\') {
      if (i + 1 >= n) { addLit('\\'); i++; continue; }
      if (next === '\n') { i += 2; continue; }
      addQuoted(next);
      i += 2;
      continue;
    }
    if (c === "'") {
      const j = line.indexOf("'", i + 1);
      if (j < 0) throw new Complex();
      addQuoted(line.slice(i + 1, j));
      i = j + 1;
      continue;
    }
    if (c === '"') {
      let j = i + 1;
      let buf = '';
      let closed = false;
      while (j < n) {
        const d = line[j];
        if (d === '\\' && j + 1 < n && '$`"\\\n'.includes(line[j + 1])) {
          if (line[j + 1] !== '\n') buf += line[j + 1];
          j += 2;
          continue;
        }
        if (d === '"') { closed = true; break; }
        // Command substitution runs inside double quotes too.
        if (d === '`' || (d === '$' && line[j + 1] === '(')) throw new Complex();
        buf += d;
        j++;
      }
      if (!closed) throw new Complex();
      addQuoted(buf);
      i = j + 1;
      continue;
    }
    if (c === '`') throw new Complex();
    if (c === '$' && next === '(') throw new Complex();
    if ((c === '<' || c === '>') && next === '(') throw new Complex();
    if (c === ' ' || c === '\t' || c === '\r') { endWord(); i++; continue; }
    if (c === '\n' || c === ';') { endCmd(); i++; continue; }
    if (c === '|') {
      if (inWord && allLit && word.endsWith('>')) { addLit('|'); i++; continue; } // >| clobber
      endCmd();
      i += next === '|' ? 2 : 1;
      continue;
    }
    if (c === '&') {
      if (next === '&') { endCmd(); i += 2; continue; }
      if (inWord && allLit && /[<>]$/.test(word)) { addLit('&'); i++; continue; } // 2>&1, >&2
      if (next === '>') { endWord(); addLit('&'); i++; continue; } // &> file
      endCmd();
      i++;
      continue;
    }
    if (c === '<' || c === '>') {
      if (inWord && !isRedirPrefix()) endWord(); // a>b: sh reads "a" then ">b"
      addLit(c);
      i++;
      continue;
    }
    addLit(c);
    i++;
  }
  endCmd();
  return cmds;
}

const IGNORED_TARGETS = new Set(['/dev/null', '/dev/stdout', '/dev/stderr', '&1', '&2', '&-']);

/** True when a path may be outside the working tree (absolute, `~`, or a `..` component), unless under /tmp. */
function risky(p: string): boolean {
  if (p === '') return false;
  if (p.split('/').includes('..')) return true;
  if (p.startsWith('~')) return true;
  if (p.startsWith('/')) return !(p === '/tmp' || p.startsWith('/tmp/'));
  return false;
}

const NONE_PROGRAMS = new Set(('ls cat head tail less more grep egrep fgrep rg ag wc echo printf pwd whoami id date which type file ' +
  'stat du df ps uname hostname diff cmp sort uniq cut tr awk jq test [ true false sleep tree realpath readlink dirname ' +
  'basename md5sum sha1sum sha256sum env printenv man free uptime nproc seq yes column xxd od hexdump strings nl tac rev ' +
  'fold fmt paste join comm expr bc cd ping dig nslookup host').split(' '));

const GIT_PROGRAMS = new Set(('rm mv cp touch mkdir rmdir ln chmod chown tee truncate patch unzip tar gzip gunzip zip dd ' +
  'install shred split csplit vi vim nano ed').split(' '));

const FORK_PROGRAMS = new Set(('psql mysql mariadb mongo mongosh redis-cli pg_restore systemctl service supervisorctl kill ' +
  'pkill killall reboot shutdown halt docker podman alembic flyway liquibase').split(' '));

const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh']);

const GIT_NONE_SUBS = new Set(('status log diff show rev-parse ls-files ls-tree blame grep describe shortlog cat-file show-ref ' +
  'for-each-ref name-rev rev-list count-objects help version fetch push').split(' '));

const isOpt = (w: string) => w.startsWith('-') && w !== '-';
const nonOptions = (args: string[]) => args.filter((a) => !isOpt(a));
/** A single-dash bundle of short options (`-fdx`), not a long option. */
const isBundle = (w: string) => /^-[A-Za-z0-9]/.test(w);
const bundleHas = (w: string, chars: string) => isBundle(w) && [...w.slice(1)].some((ch) => chars.includes(ch));

/** The outcome of a program's classification: its kind and, for `git`, the paths the path rule checks. */
interface Verdict { kind: UndoKind; paths?: string[] }

function gitVerdict(args: string[]): Verdict {
  let i = 0;
  while (i < args.length && isOpt(args[i])) {
    const a = args[i];
    if (a === '--version' || a === '--help' || a === '-h') return { kind: 'none' };
    if (a === '-C' || a === '-c' || a === '--git-dir' || a === '--work-tree' || a === '--namespace') i += 2;
    else i += 1;
  }
  if (i >= args.length) return { kind: 'none' };
  const sub = args[i];
  const rest = args.slice(i + 1);
  const git: Verdict = { kind: 'git', paths: nonOptions(rest) };
  if (GIT_NONE_SUBS.has(sub)) return { kind: 'none' };
  switch (sub) {
    case 'remote':
      return rest.length === 0 || ['-v', '--verbose', 'show', 'get-url'].includes(rest[0]) ? { kind: 'none' } : git;
    case 'branch': {
      if (rest.some((a) => a === '--delete' || a === '--move' || a === '--force-delete' || (isBundle(a) && bundleHas(a, 'dDmM')))) return { kind: 'checkpoint' };
      const listing = ['-a', '-r', '-v', '-vv', '--list', '--show-current', '--all', '--remotes', '--verbose', '-l'];
      if (rest.every((a) => listing.includes(a)) || rest.includes('--list') || rest.includes('-l')) return { kind: 'none' };
      return git;
    }
    case 'tag':
      if (rest.some((a) => a === '-d' || a === '--delete')) return { kind: 'checkpoint' };
      if (rest.length === 0 || rest.includes('-l') || rest.includes('--list')) return { kind: 'none' };
      return git;
    case 'config':
      if (rest.some((a) => ['--get', '--get-all', '--get-regexp', '--list', '-l'].includes(a))) return { kind: 'none' };
      return { kind: 'checkpoint' };
    case 'stash':
      if (rest[0] === 'list' || rest[0] === 'show') return { kind: 'none' };
      if (rest[0] === 'drop' || rest[0] === 'clear') return { kind: 'checkpoint' };
      return git;
    case 'reflog':
      if (rest.length === 0 || rest[0] === 'show') return { kind: 'none' };
      if (rest[0] === 'expire' || rest[0] === 'delete') return { kind: 'checkpoint' };
      return git;
    case 'worktree':
      return rest[0] === 'list' ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'clean':
      return rest.some((a) => isBundle(a) && bundleHas(a, 'xX')) ? { kind: 'checkpoint' } : git;
    case 'update-ref':
      return rest.includes('-d') ? { kind: 'checkpoint' } : git;
    case 'gc': case 'prune': case 'filter-branch': case 'filter-repo': case 'submodule': case 'init': case 'clone':
      return { kind: 'checkpoint' };
    default:
      return git;
  }
}

function curlVerdict(args: string[]): Verdict {
  const targets: string[] = [];
  let writes = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '-o' || a === '--output') { writes = true; if (i + 1 < args.length) targets.push(args[++i]); continue; }
    if (a.startsWith('--output=')) { writes = true; targets.push(a.slice(9)); continue; }
    if (a === '-O' || a === '--remote-name' || a === '--remote-name-all') { writes = true; continue; }
    if (isBundle(a) && !a.startsWith('--')) {
      const body = a.slice(1);
      const oi = body.indexOf('o');
      if (oi >= 0) {
        writes = true;
        const rest = body.slice(oi + 1);
        if (rest) targets.push(rest);
        else if (i + 1 < args.length) targets.push(args[++i]);
      } else if (body.includes('O')) writes = true;
    }
  }
  return writes ? { kind: 'git', paths: targets } : { kind: 'none' };
}

function wgetVerdict(args: string[]): Verdict {
  const paths = nonOptions(args);
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    let target: string | undefined;
    if (a === '-O' || a === '--output-document' || a === '-P' || a === '--directory-prefix') target = args[i + 1];
    else if (a.startsWith('--output-document=')) target = a.slice(18);
    else if (isBundle(a) && a.includes('O')) {
      const rest = a.slice(a.indexOf('O') + 1);
      target = rest || args[i + 1];
    }
    if (target === '-') return { kind: 'none' };
    if (target !== undefined) paths.push(target);
  }
  return { kind: 'git', paths };
}

/** Classifies a program with its arguments by the tables. */
function programVerdict(prog: string, args: string[]): Verdict {
  // Database migrations first: they outrank the generic rule of their program.
  if ((prog === 'python' || prog === 'python3') && /(^|\/)manage\.py$/.test(args[0] ?? '') && args[1] === 'migrate') return { kind: 'fork' };
  if ((prog === 'rails' || prog === 'rake') && (args[0] ?? '').startsWith('db:')) return { kind: 'fork' };
  if (prog === 'npx' && args[0] === 'prisma' && args[1] === 'migrate') return { kind: 'fork' };
  if (prog === 'prisma' && args[0] === 'migrate') return { kind: 'fork' };
  if (prog === 'knex' && (args[0] ?? '').startsWith('migrate')) return { kind: 'fork' };
  if (prog === 'sequelize' && (args[0] ?? '').startsWith('db:migrate')) return { kind: 'fork' };
  if (FORK_PROGRAMS.has(prog)) return { kind: 'fork' };

  switch (prog) {
    case 'find':
      return args.some((a) => ['-delete', '-exec', '-execdir', '-ok', '-okdir', '-fprint', '-fprint0', '-fprintf', '-fls'].includes(a))
        ? { kind: 'checkpoint' } : { kind: 'none' };
    case 'sed':
      return args.some((a) => a.startsWith('--in-place') || (isBundle(a) && a.slice(1).includes('i')))
        ? { kind: 'git', paths: nonOptions(args) } : { kind: 'none' };
    case 'curl':
      return curlVerdict(args);
    case 'wget':
      return wgetVerdict(args);
    case 'python': case 'python3': case 'node':
      return args.length > 0 && args.every((a) => a === '--version' || a === '-V' || a === '-v') ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'git':
      return gitVerdict(args);
    case 'npm':
      return ['ls', 'list', 'view', 'outdated', '--version', '-v'].includes(args[0]) ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'pip': case 'pip3':
      return ['list', 'show', 'freeze', '--version', '-V'].includes(args[0]) ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'go':
      if (args[0] === 'env' && args.some((a) => a === '-w' || a === '-u')) return { kind: 'checkpoint' };
      return ['version', 'env', 'list', 'vet'].includes(args[0]) ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'cargo':
      return args[0] === '--version' || args[0] === '-V' ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'apt':
      return args[0] === 'list' ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'apt-cache':
      return { kind: 'none' };
    case 'dpkg':
      return ['-l', '-L', '-s', '--list', '--listfiles', '--status'].includes(args[0]) ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'make':
      return args.some((a) => a === '-n' || a === '--dry-run' || a === '--just-print') ? { kind: 'none' } : { kind: 'checkpoint' };
    case 'pg_dump':
      return args.some((a) => a === '-f' || a.startsWith('--file') || /^-f./.test(a)) ? { kind: 'checkpoint' } : { kind: 'none' };
    case 'dd':
      return { kind: 'git', paths: args.filter((a) => a.startsWith('of=')).map((a) => a.slice(3)).concat(nonOptions(args).filter((a) => !a.includes('='))) };
  }
  if (NONE_PROGRAMS.has(prog)) return { kind: 'none' };
  if (GIT_PROGRAMS.has(prog)) return { kind: 'git', paths: nonOptions(args) };
  return { kind: 'checkpoint' };
}

const ASSIGN = /^[A-Za-z_][A-Za-z0-9_]*=/;
const isAssign = (w: Word) => {
  const m = ASSIGN.exec(w.text);
  return m !== null && w.lit >= m[0].length;
};

/** Drops a wrapper's options; returns the index of its command. */
function skipWrapper(name: string, w: string[], i: number): number {
  const withArg: Record<string, string[]> = {
    sudo: ['-u', '-g', '-h', '-p', '-C', '-D', '-r', '-t', '-U'],
    env: ['-u', '-C', '-S', '--unset', '--chdir'],
    nice: ['-n', '--adjustment'],
    timeout: ['-s', '-k', '--signal', '--kill-after'],
    ionice: ['-c', '-n', '-p', '-P', '-u', '--class', '--classdata'],
    xargs: ['-I', '-n', '-P', '-d', '-L', '-s', '-E', '-a', '--max-args', '--max-procs', '--delimiter', '--arg-file', '--max-lines', '--max-chars'],
    stdbuf: ['-i', '-o', '-e'],
    time: ['-f', '-o', '--format', '--output'],
    command: [],
    exec: ['-a'],
    nohup: [],
  };
  const takes = withArg[name] ?? [];
  while (i < w.length) {
    const a = w[i];
    if (a === '--') return i + 1;
    if (name === 'env' && ASSIGN.test(a)) { i++; continue; }
    if (name === 'sudo' && ASSIGN.test(a)) { i++; continue; }
    if (!isOpt(a)) break;
    i += takes.includes(a) ? 2 : 1;
  }
  if (name === 'timeout' && i < w.length) i++; // the duration
  return i;
}

const WRAPPERS = new Set(['sudo', 'env', 'nice', 'nohup', 'time', 'command', 'exec', 'timeout', 'stdbuf', 'ionice', 'xargs']);
const KEYWORDS = new Set(['!', 'if', 'then', 'else', 'elif', 'do', 'while', 'until', '{']);

function basename(p: string): string {
  const i = p.lastIndexOf('/');
  return i >= 0 && i < p.length - 1 ? p.slice(i + 1) : p;
}

function classifySimple(words: Word[], depth: number): UndoKind {
  // Redirections.
  const writes: string[] = [];
  const args: Word[] = [];
  for (let i = 0; i < words.length; i++) {
    const w = words[i];
    const m = /^(\d*>>?\|?|&>>?|\d*<>|\d*<<?<?-?)/.exec(w.text);
    if (m && m[0].length > 0 && m[0].length <= w.lit && /[<>]/.test(m[0])) {
      let target = w.text.slice(m[0].length);
      if (target === '' && i + 1 < words.length) target = words[++i].text;
      if (m[0].includes('>') && !IGNORED_TARGETS.has(target) && !/^&\d+$/.test(target)) writes.push(target);
      continue;
    }
    args.push(w);
  }
  // Prefixes: assignments, keywords, wrappers.
  let i = 0;
  while (i < args.length && (isAssign(args[i]) || (i === 0 && KEYWORDS.has(args[i].text)))) i++;
  const texts = args.map((a) => a.text);
  let prog = '';
  let rest: string[] = [];
  for (;;) {
    if (i >= texts.length) break;
    const name = basename(texts[i]);
    if (WRAPPERS.has(name)) {
      const j = skipWrapper(name, texts, i + 1);
      if (j >= texts.length) { prog = name; rest = texts.slice(i + 1); break; }
      i = j;
      while (i < texts.length && ASSIGN.test(texts[i])) i++;
      continue;
    }
    prog = name;
    rest = texts.slice(i + 1);
    break;
  }
  let verdict: Verdict;
  if (prog === '' || prog === 'fi' || prog === 'done' || prog === '}') verdict = { kind: 'none' };
  else if (SHELLS.has(prog)) {
    let s: string | undefined;
    let k = 0;
    let hasC = false;
    while (k < rest.length && isOpt(rest[k])) {
      if (isBundle(rest[k]) && rest[k].slice(1).includes('c')) hasC = true;
      if (rest[k] === '-o' || rest[k] === '+o') k++;
      k++;
    }
    if (hasC && k < rest.length) s = rest[k];
    verdict = s !== undefined && depth < 8 ? { kind: classifyLine(s, depth + 1) } : { kind: 'checkpoint' };
  } else if (prog === 'source' || prog === '.') verdict = { kind: 'checkpoint' };
  else verdict = programVerdict(prog, rest);

  let kind = verdict.kind;
  let paths = verdict.paths ?? [];
  if (writes.length > 0 && kind === 'none') {
    kind = 'git';
    paths = SHELLS.has(prog) ? [] : nonOptions(rest);
  }
  if (kind === 'git') {
    const longValues = rest.filter((a) => a.startsWith('--') && a.includes('=')).map((a) => a.slice(a.indexOf('=') + 1));
    if ([...paths, ...writes, ...longValues].some(risky)) kind = 'checkpoint';
  }
  return kind;
}

function classifyLine(line: string, depth: number): UndoKind {
  let cmds: Word[][];
  try {
    cmds = splitLine(line);
  } catch (e) {
    if (e instanceof Complex) return 'checkpoint';
    throw e;
  }
  let kind: UndoKind = 'none';
  for (const c of cmds) {
    kind = max(kind, classifySimple(c, depth));
    if (kind === 'fork') break;
  }
  return kind;
}

/**
 * Classifies a shell command line by the lightest undo that covers what it
 * can break: `none` (reads) < `git` (working-tree edits) < `checkpoint`
 * (system changes, unknown programs) < `fork` (running processes, servers).
 * A line gets the highest kind of its parts. See docs/undo.md.
 */
export function checkpointFor(command: string): UndoKind {
  return classifyLine(command, 0);
}
