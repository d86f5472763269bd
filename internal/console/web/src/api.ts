// The console's only way to sbxd: the public REST API v1 (docs/api.md),
// with the API key the person signed in with, sent as the usual
// "Authorization: Bearer" header. The key lives in sessionStorage (this tab
// only, gone when it closes) and never in a URL.

const keyItem = "sbx.key";

/** The key of this tab's session, or null when signed out. */
export function apiKey(): string | null {
  return sessionStorage.getItem(keyItem);
}

export function setAPIKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(keyItem);
  else sessionStorage.setItem(keyItem, key);
}

/** An error answer of the API: its HTTP status (0 for an NDJSON error line), code and message. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Called when sbxd refuses the key (401): the app signs out. */
let onUnauthorized: (e: APIError) => void = () => {};
export function whenUnauthorized(f: (e: APIError) => void): void {
  onUnauthorized = f;
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { ...extra };
  const k = apiKey();
  if (k !== null) h["Authorization"] = "Bearer " + k;
  return h;
}

async function errorOf(r: Response): Promise<APIError> {
  let code = "internal";
  let message = `${r.status} ${r.statusText}`;
  try {
    const b = (await r.json()) as { error?: { code?: string; message?: string } };
    if (b.error?.code) code = b.error.code;
    if (b.error?.message) message = b.error.message;
  } catch {
    // not the API's JSON error body: keep the status line
  }
  const e = new APIError(r.status, code, message);
  if (r.status === 401) onUnauthorized(e);
  return e;
}

function request(method: string, path: string, body?: unknown, accept?: string): Promise<Response> {
  const h = headers(body === undefined ? {} : { "Content-Type": "application/json" });
  if (accept) h["Accept"] = accept;
  return fetch(path, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
  });
}

/** One API call answering JSON (or nothing, 204). Throws APIError. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const r = await request(method, path, body);
  if (!r.ok) throw await errorOf(r);
  if (r.status === 204) return undefined as T;
  return (await r.json()) as T;
}

/** A line of a long operation's NDJSON answer (docs/api.md, Long operations). */
export interface StreamLine {
  type: string;
  data?: unknown;
  error?: string;
  code?: string;
}

/**
 * Reads an NDJSON answer line by line, giving each line to onLine, until
 * it ends or signal aborts. Throws APIError for an error answer.
 */
export async function lines(
  method: string,
  path: string,
  body: unknown,
  onLine: (l: StreamLine) => void,
  signal?: AbortSignal,
): Promise<void> {
  const h = headers(body === undefined ? {} : { "Content-Type": "application/json" });
  h["Accept"] = "application/x-ndjson";
  const r = await fetch(path, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    signal,
  });
  if (!r.ok) throw await errorOf(r);
  if (!r.body) return;
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line !== "") onLine(JSON.parse(line) as StreamLine);
    }
  }
  if (buf.trim() !== "") onLine(JSON.parse(buf) as StreamLine);
}

/**
 * Runs a long operation (restore, checkpoint, fork...) and returns its
 * "complete" line's data; info lines go to onInfo. Throws APIError for an
 * "error" line, and when the stream ends without a final line.
 */
export async function operation<T>(method: string, path: string, body: unknown, onInfo: (s: string) => void): Promise<T> {
  let result: { ok: true; data: T } | { ok: false; err: APIError } | null = null;
  await lines(method, path, body, (l) => {
    if (l.type === "info") onInfo(String(l.data ?? ""));
    else if (l.type === "complete") result = { ok: true, data: l.data as T };
    else if (l.type === "error") result = { ok: false, err: new APIError(0, l.code ?? "internal", l.error ?? "failed") };
  });
  const r = result as { ok: true; data: T } | { ok: false; err: APIError } | null;
  if (r === null) throw new APIError(0, "unavailable", "the answer ended before the operation did; reload to see where it is");
  if (!r.ok) throw r.err;
  return r.data;
}

// The API's shapes the console reads (api/openapi.yaml); only the fields shown.

export interface Sandbox {
  id: string;
  name: string;
  state: string;
  state_reason?: string;
  image: string;
  cpus: number;
  memory_mb: number;
  disk_mb: number;
  labels: Record<string, string> | null;
  create_time: string;
  source: { sandbox?: string; snapshot?: string } | null;
  network: NetworkRules;
  /** The node the sandbox runs on, where sbxd has several (not on every sbxd). */
  node?: string;
}

export interface Checkpoint {
  id: string;
  create_time: string;
  comment: string;
  source_id: string | null;
  health: string;
  size_bytes: number;
  files: number;
  added_bytes: number;
}

export interface Snapshot {
  id: string;
  name: string;
  sandbox: string;
  create_time: string;
  expire_time: string | null;
  memory_bytes: number;
  disk_bytes: number;
  stored_bytes: number;
  health: string;
}

export interface Change {
  path: string;
  type: string;
  old_type?: string;
  link_target?: string;
  size: number;
  old_size: number;
}

export interface Diff {
  from: string;
  to: string;
  added: Change[] | null;
  modified: Change[] | null;
  deleted: Change[] | null;
  truncated?: boolean;
}

export interface Process {
  pid: number;
  cmd: string[];
  start_time: string;
  state: string;
  exit_code?: number;
  output_bytes: number;
}

export interface NetworkRules {
  internet: boolean;
  allow: string[] | null;
  deny: string[] | null;
  connect: string[] | null;
}

export interface NetworkLog {
  counts: {
    dns_answered: number;
    dns_refused: number;
    connections_allowed: number;
    connections_refused: number;
    packets_refused: number;
  };
  refused: { time: string; kind: string; destination: string; address?: string; port?: number; reason: string; count: number }[] | null;
}

export interface Port {
  port: number;
  address: string;
  pid?: number;
  command?: string;
  /**
   * What a preview link carries as ?sbx_preview= to open this port (and
   * nothing else) without the key in the URL; sbxd mints it for the
   * signed-in key (docs/api.md, Ports). Absent when sbxd made none.
   */
  preview_token?: string;
}

/** The usage of one group of GET /v1/usage (api.UsageEntry); only the group's own field is set. */
export interface UsageEntry {
  sandbox?: string;
  sandbox_id?: string;
  key?: string;
  day?: string;
  /** CPU time used, in seconds (one core busy for a second is 1). */
  cpu_seconds: number;
  /** Memory allocated while running (memory_mb / 1024) times seconds running. */
  memory_gib_seconds: number;
  /** Checkpoint and snapshot bytes kept times seconds kept. */
  stored_byte_seconds: number;
  /** In US dollars at the answer's prices. */
  cost: number;
}

/** The answer of GET /v1/usage (api.Usage): usage in [since, until), grouped and priced. */
export interface Usage {
  since: string;
  until: string;
  group_by: string;
  prices: { cpu_hour: number; memory_gib_hour: number; storage_gb_month: number };
  usage: UsageEntry[] | null;
  total: UsageEntry;
}

/** path of a sandbox's API resource: /v1/sandboxes/{name}/{rest}, escaped. */
export function sbPath(name: string, ...rest: string[]): string {
  return ["/v1/sandboxes", name, ...rest].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join("/");
}
