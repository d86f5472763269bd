/**
 * The one place where the SDK's camelCase meets the wire's snake_case.
 * {@link toWire} converts a request body or query (camel → snake),
 * {@link fromWire} an answer or an NDJSON line (snake → camel), deep,
 * through objects and arrays. The values of free-form map fields (labels,
 * env, metadata, an event's data: `WIRE_MAP_FIELDS`, generated from
 * api/openapi.yaml) are the caller's and are passed through untouched,
 * keys and all. The transport (`http.ts`) is the only caller.
 *
 * @internal
 * @module
 */
import { WIRE_MAP_FIELDS, WIRE_NAME_EXCEPTIONS } from './types.gen.js';

const FROM_EXCEPTIONS: Readonly<Record<string, string>> = Object.fromEntries(
  Object.entries(WIRE_NAME_EXCEPTIONS).map(([c, w]) => [w, c]),
);

/** `memoryMb` → `memory_mb` (a name listed in `WIRE_NAME_EXCEPTIONS` maps as listed). */
export function wireName(name: string): string {
  return WIRE_NAME_EXCEPTIONS[name] ?? name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
}

/** `memory_mb` → `memoryMb`. */
export function camelName(name: string): string {
  return FROM_EXCEPTIONS[name] ?? name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function convert(v: unknown, key: (k: string) => string): unknown {
  if (Array.isArray(v)) return v.map((x) => convert(x, key));
  if (!isPlainObject(v)) return v; // strings, numbers, null, bytes, Dates: as they are
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) {
    const w = key(k);
    // A map field is recognised by its wire name whichever way we go.
    const isMap = WIRE_MAP_FIELDS.has(key === wireName ? w : k);
    out[w] = isMap ? x : convert(x, key);
  }
  return out;
}

/**
 * A request body or query, camelCase → the wire's snake_case, deep; the
 * values of map fields (`labels`, `env`, `metadata`, ...) are not touched.
 * `undefined` members stay undefined (JSON.stringify drops them).
 */
export function toWire<T = unknown>(v: unknown): T {
  return convert(v, wireName) as T;
}

/**
 * An answer or NDJSON line, the wire's snake_case → camelCase, deep; the
 * values of map fields are not touched.
 */
export function fromWire<T = unknown>(v: unknown): T {
  return convert(v, camelName) as T;
}
