#!/usr/bin/env node
// Generates src/types.gen.ts from api/openapi.yaml, the one contract of the
// sbx REST API: one exported type per component schema, property names in
// camelCase (the SDK converts to and from the wire's snake_case in one
// place, src/wire.ts), doc comments from the schema's descriptions,
// optional where the schema does not require a field, enums as string
// unions.
//
// It also emits WIRE_MAP_FIELDS, the wire property names whose values are
// free-form maps (`additionalProperties`, or an object or value without
// declared properties: labels, env, metadata, an event's data) whose keys
// the conversion must leave as they are, and WIRE_NAME_EXCEPTIONS, the
// camelCase names whose wire name is not their snake_case (a wire name
// that is already camelCase, such as a DSSE envelope's `payloadType`). It
// fails when one property name is a free-form map in one schema and an
// object with declared properties in another: a single name cannot be both
// converted and left alone.
//
//   npm run gen          writes src/types.gen.ts
//   test/types.test.ts   regenerates in memory and fails on any difference
//
// Only the top-level `properties` of a schema (and of inline objects and
// array items under them) are read: `allOf` / `if` / `then` refinements
// (the stream lines' typed `data`) are not types here; the transport
// converts a long operation's result as a value of its own.
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

/** `memory_mb` → `memoryMb`. */
export function camel(s) {
  return s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
}

/** `memoryMb` → `memory_mb`. */
export function snake(s) {
  return s.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
}

function refName(ref) {
  const m = /^#\/components\/schemas\/([A-Za-z0-9_]+)$/.exec(ref);
  if (!m) throw new Error(`unsupported $ref ${ref}`);
  return m[1];
}

function comment(lines, indent) {
  const text = lines.filter((l) => l !== undefined && l !== '').join('\n').trim();
  if (!text) return '';
  const body = text.replace(/\*\//g, '*\\/').split('\n').map((l) => l.trimEnd());
  if (body.length === 1) return `${indent}/** ${body[0]} */\n`;
  return `${indent}/**\n${body.map((l) => `${indent} *${l ? ' ' + l : ''}`).join('\n')}\n${indent} */\n`;
}

function literal(v) {
  return v === null ? 'null' : JSON.stringify(v);
}

function validIdent(k) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? k : JSON.stringify(k);
}

/**
 * Generates the module. `specText` is api/openapi.yaml's text. Returns
 * `{ source, mapFields, exceptions }`; throws on a name that is a map in one
 * schema and an object in another, or on a construct it cannot type.
 */
export function generate(specText) {
  const spec = parse(specText);
  const schemas = spec?.components?.schemas;
  if (!schemas || typeof schemas !== 'object') throw new Error('openapi.yaml: no components.schemas');

  // kinds: wire property name → Map(kind → first "Schema.path" seen)
  const kinds = new Map();
  const exceptions = new Map();
  const seen = (name, kind, where) => {
    if (!kinds.has(name)) kinds.set(name, new Map());
    const m = kinds.get(name);
    if (!m.has(kind)) m.set(kind, where);
    const c = camel(name);
    if (snake(c) !== name) exceptions.set(c, name);
  };

  /** 'map' | 'struct' | 'other' of a schema, following $ref. */
  const kindOf = (s, depth = 0) => {
    if (!s || typeof s !== 'object' || depth > 20) return 'other';
    if (s.$ref) return kindOf(schemas[refName(s.$ref)], depth + 1);
    if (s.properties) return 'struct';
    for (const k of ['oneOf', 'anyOf']) {
      if (Array.isArray(s[k])) {
        const ks = new Set(s[k].map((x) => kindOf(x, depth + 1)).filter((x) => x !== 'other'));
        if (ks.size > 1) return 'mixed';
        return ks.size ? [...ks][0] : 'other';
      }
    }
    if (s.type === 'array') return kindOf(s.items, depth + 1);
    const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
    if (types.includes('object')) return 'map';
    if (types.length === 0 && s.const === undefined && !s.enum && !s.allOf) return 'map'; // any JSON value
    return 'other';
  };

  const tsType = (s, indent, where) => {
    if (s === undefined || s === null || s === true) return 'unknown';
    if (s.$ref) return refName(s.$ref);
    if (s.const !== undefined) return literal(s.const);
    if (Array.isArray(s.oneOf) || Array.isArray(s.anyOf)) {
      const alts = (s.oneOf ?? s.anyOf).map((x) => tsType(x, indent, where));
      return [...new Set(alts)].join(' | ');
    }
    if (Array.isArray(s.enum)) return s.enum.map(literal).join(' | ');
    if (Array.isArray(s.type)) {
      return s.type.map((t) => tsType({ ...s, type: t }, indent, where)).join(' | ');
    }
    switch (s.type) {
      case 'string': return 'string';
      case 'integer': case 'number': return 'number';
      case 'boolean': return 'boolean';
      case 'null': return 'null';
      case 'array': {
        const it = tsType(s.items, indent, where + '[]');
        return /^[A-Za-z0-9_]+$/.test(it) ? `${it}[]` : `Array<${it}>`;
      }
      case 'object':
        if (s.properties) return objectBody(s, indent, where);
        if (s.additionalProperties && typeof s.additionalProperties === 'object') {
          return `Record<string, ${tsType(s.additionalProperties, indent, where + '{}')}>`;
        }
        return 'Record<string, unknown>';
      case undefined:
        if (s.properties) return objectBody(s, indent, where);
        return 'unknown';
      default:
        throw new Error(`${where}: unsupported type ${JSON.stringify(s.type)}`);
    }
  };

  const objectBody = (s, indent, where) => {
    const required = new Set(s.required ?? []);
    const inner = indent + '  ';
    let out = '{\n';
    for (const [name, p] of Object.entries(s.properties)) {
      const at = `${where}.${name}`;
      const k = kindOf(p);
      if (k === 'mixed') throw new Error(`${at}: one of its alternatives is a map, another an object`);
      seen(name, k, at);
      const doc = [p.description];
      if (p.default !== undefined) doc.push(`Default: \`${JSON.stringify(p.default)}\`.`);
      out += comment(doc, inner);
      out += `${inner}${validIdent(camel(name))}${required.has(name) ? '' : '?'}: ${tsType(p, inner, at)};\n`;
    }
    return out + indent + '}';
  };

  let out = `// Code generated by scripts/gen-types.mjs from api/openapi.yaml. DO NOT EDIT.
// Run \`npm run gen\` after changing the schema.

/**
 * The wire types of the sbx REST API v1, generated from api/openapi.yaml:
 * one type per component schema, property names in camelCase (the wire is
 * snake_case; src/wire.ts converts).
 *
 * @module
 */
`;
  for (const [name, s] of Object.entries(schemas)) {
    const doc = comment([s.description], '');
    if (s.properties || (s.type === 'object' && !s.additionalProperties && !s.allOf)) {
      out += `\n${doc}export interface ${name} ${s.properties ? objectBody(s, '', name) : '{\n  [field: string]: unknown;\n}'}\n`;
    } else if (s.allOf) {
      const bases = s.allOf.filter((x) => x.$ref).map((x) => refName(x.$ref));
      out += `\n${doc}export type ${name} = ${bases.length ? bases.join(' & ') : 'Record<string, unknown>'};\n`;
    } else {
      out += `\n${doc}export type ${name} = ${tsType(s, '', name)};\n`;
    }
  }

  const conflicts = [];
  const mapFields = [];
  for (const [name, m] of kinds) {
    if (m.has('map') && m.has('struct')) conflicts.push(`${name}: a map at ${m.get('map')}, an object at ${m.get('struct')}`);
    else if (m.has('map')) mapFields.push(name);
  }
  if (conflicts.length) throw new Error(`property names both a free-form map and an object (the SDK cannot tell whether to convert their keys):\n  ${conflicts.join('\n  ')}`);
  mapFields.sort();
  const exc = [...exceptions].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

  out += `
/**
 * Wire property names whose values are free-form maps or any JSON value
 * (labels, env, metadata, an event's data): their keys are the caller's and
 * are never converted between camelCase and snake_case.
 */
export const WIRE_MAP_FIELDS: ReadonlySet<string> = new Set([
${mapFields.map((n) => `  ${JSON.stringify(n)},`).join('\n')}
]);

/** camelCase property names whose wire name is not their snake_case form. */
export const WIRE_NAME_EXCEPTIONS: Readonly<Record<string, string>> = {
${exc.map(([c, w]) => `  ${validIdent(c)}: ${JSON.stringify(w)},`).join('\n')}
};
`;
  return { source: out, mapFields, exceptions: Object.fromEntries(exc) };
}

/** The path of api/openapi.yaml and of src/types.gen.ts, from this script. */
export const SPEC_PATH = fileURLToPath(new URL('../../../api/openapi.yaml', import.meta.url));
export const OUT_PATH = fileURLToPath(new URL('../src/types.gen.ts', import.meta.url));

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { source } = generate(readFileSync(SPEC_PATH, 'utf8'));
  writeFileSync(OUT_PATH, source);
  console.log(`wrote ${OUT_PATH}`);
}
