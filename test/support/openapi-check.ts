import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import { parse } from 'yaml';

/**
 * Checks real answers against docs/openapi.yaml: given one exchange (method, target, status,
 * headers, body), finds the operation the server routes it to and says whether the answer is one
 * the description gives for it. An answer whose status the operation does not list is a
 * mismatch, and so is any answer but the wall for a route the description does not have.
 */

export const OPENAPI_FILE = fileURLToPath(new URL('../../docs/openapi.yaml', import.meta.url));

/** One request and its answer, as a test saw them. */
export interface Exchange {
  method: string;
  /** The request target as sent: a path with its query, or an absolute `http://host/path` URL. */
  target: string;
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

type Json = Record<string, unknown>;

/** A path of the description, cut into segments: a literal, or a `{parameter}` (null). */
interface Route {
  template: string;
  segments: Array<string | null>;
  api: boolean;
}

/** Keywords of the OpenAPI 3.1 base dialect that JSON Schema 2020-12 does not have. */
const OPENAPI_VOCABULARY = ['example', 'discriminator', 'xml', 'externalDocs'];
/**
 * The fields of the OpenAPI document itself. The whole document is added to ajv so that its
 * schemas resolve their `#/components/…` references; these must not read as unknown keywords.
 */
const DOCUMENT_FIELDS = ['openapi', 'info', 'jsonSchemaDialect', 'servers', 'paths', 'webhooks', 'components', 'security', 'tags'];
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** A compiler for the description's schemas: 2020-12, refusing unknown keywords (a typo in the document). */
export function schemaCompiler(): Ajv2020 {
  const ajv = new Ajv2020({ allErrors: true, strictSchema: true, strictNumbers: true, strictTypes: false, strictTuples: false, strictRequired: false });
  ajv.addVocabulary(OPENAPI_VOCABULARY);
  return ajv;
}

export class OpenApiDescription {
  private readonly ajv = schemaCompiler();
  private readonly routes: Route[];
  private readonly validators = new Map<string, ValidateFunction>();
  /** Every operation and status the checked answers used, as `GET /api/v2/logs 200`. */
  readonly seen = new Set<string>();

  constructor(readonly doc: Json) {
    // The document is added whole (it is not compiled whole): each schema is compiled from its
    // JSON pointer, so that `#/components/…` references resolve as they do in the document.
    this.ajv.addVocabulary(DOCUMENT_FIELDS);
    this.ajv.addSchema(doc, 'openapi', undefined, false);
    this.routes = Object.keys(this.paths()).map((template) => ({
      template,
      segments: template
        .split('/')
        .slice(1)
        .map((s) => (/^\{[^}]+\}$/.test(s) ? null : s)),
      api: template === '/api' || template.startsWith('/api/'),
    }));
  }

  static load(file = OPENAPI_FILE): OpenApiDescription {
    return new OpenApiDescription(parse(readFileSync(file, 'utf8')) as Json);
  }

  /** Every operation of the description, as `GET /api/v2/logs`. */
  operations(): string[] {
    const out: string[] = [];
    for (const [template, item] of Object.entries(this.paths())) {
      for (const method of METHODS) if ((item as Json)[method]) out.push(`${method.toUpperCase()} ${template}`);
    }
    return out;
  }

  /** Compiles (once) the schema at a JSON pointer of the document. */
  validator(pointer: string): ValidateFunction {
    let validate = this.validators.get(pointer);
    if (!validate) {
      validate = this.ajv.getSchema(`openapi#${pointer}`);
      if (!validate) throw new Error(`docs/openapi.yaml has no schema at ${pointer}`);
      this.validators.set(pointer, validate);
    }
    return validate;
  }

  /** The value at a JSON pointer of the document. */
  at(pointer: string): unknown {
    let value: unknown = this.doc;
    for (const part of pointer.split('/').slice(1)) {
      if (typeof value !== 'object' || value === null) return undefined;
      value = (value as Json)[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    }
    return value;
  }

  /** null when the answer is one the description gives for the request; else, in one sentence, where it is not. */
  mismatch(x: Exchange): string | null {
    const method = x.method.toUpperCase();
    const pathname = pathOf(x.target);
    const route = this.route(pathname);
    const what = `${method} ${pathname}`;
    if (route) {
      const opPointer = `/paths/${escape(route.template)}/${method.toLowerCase()}`;
      const op = this.at(opPointer) as Json | undefined;
      if (op) {
        const found = this.response(op, opPointer, x.status);
        if (!found) {
          const listed = Object.keys(op.responses as Json).join(', ');
          return `${what} (${method} ${route.template}) answered ${x.status}, which the description does not list (it lists ${listed})`;
        }
        const problem = this.answerMismatch(x, found, opPointer);
        if (problem) return `${what} (${method} ${route.template}) answered ${x.status}: ${problem}`;
        this.seen.add(`${method} ${route.template} ${x.status}`);
        return null;
      }
    }
    // No operation: the wall, but for a preflight on the queue domain and another API version's path.
    const fallback: Array<{ name: string; status: number }> = [{ name: 'Wall', status: 404 }];
    if (method === 'OPTIONS' && !isApiPath(pathname)) fallback.push({ name: 'Preflight', status: 204 });
    const version = /^\/api\/v(\d+)(?:\/|$)/.exec(pathname);
    if (version && version[1] !== '2') fallback.push({ name: 'OtherVersion', status: 426 });
    const expected = fallback.find((f) => f.status === x.status);
    const must = fallback.map((f) => `${f.name} (${f.status})`).join(' or ');
    if (!expected) return `${what} has no operation in the description, so it must get ${must}; it answered ${x.status}`;
    const pointer = `/components/responses/${expected.name}`;
    const problem = this.answerMismatch(x, { response: this.at(pointer) as Json, pointer }, undefined);
    if (problem) return `${what} has no operation in the description, so it must get ${must}; it answered ${x.status}: ${problem}`;
    this.seen.add(`${expected.name} ${x.status}`);
    return null;
  }

  private paths(): Json {
    return this.doc.paths as Json;
  }

  /** The description's path the server routes `pathname` to, if any. */
  private route(pathname: string): Route | undefined {
    const api = isApiPath(pathname);
    const raw = pathname.split('/').slice(1);
    let segments: Array<string | undefined> = raw;
    // The queue domain's router matches literals on the decoded path; Express matches them as sent.
    if (!api) segments = raw.map((s) => decoded(s));
    let best: Route | undefined;
    let bestLiterals = -1;
    for (const route of this.routes) {
      if (route.api !== api || route.segments.length !== segments.length) continue;
      const fits = route.segments.every((literal, i) => (literal === null ? raw[i] !== '' && segments[i] !== undefined : literal === segments[i]));
      const literals = route.segments.filter((s) => s !== null).length;
      if (fits && literals > bestLiterals) {
        best = route;
        bestLiterals = literals;
      }
    }
    return best;
  }

  /** The response object an operation lists for a status (with its pointer, references followed). */
  private response(op: Json, opPointer: string, status: number): { response: Json; pointer: string } | undefined {
    const responses = op.responses as Json;
    const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => k in responses);
    if (key === undefined) return undefined;
    return this.follow(`${opPointer}/responses/${escape(key)}`);
  }

  private follow(pointer: string): { response: Json; pointer: string } {
    let at = pointer;
    let value = this.at(at) as Json;
    while (typeof value.$ref === 'string') {
      at = value.$ref.slice(1);
      value = this.at(at) as Json;
    }
    return { response: value, pointer: at };
  }

  private answerMismatch(x: Exchange, { response, pointer }: { response: Json; pointer: string }, opPointer: string | undefined): string | null {
    for (const name of Object.keys((response.headers ?? {}) as Json)) {
      const { response: header, pointer: headerPointer } = this.follow(`${pointer}/headers/${escape(name)}`);
      const value = x.headers[name.toLowerCase()];
      if (value === undefined) {
        if (header.required === true) return `header ${name} is missing`;
        continue;
      }
      if (header.schema !== undefined) {
        const validate = this.validator(`${headerPointer}/schema`);
        if (!validate(value)) return `header ${name}: ${JSON.stringify(value)} ${describe(validate.errors)}`;
      }
    }
    const content = response.content as Json | undefined;
    if (!content) return x.body.length === 0 ? null : `the description gives this answer no body, but it has ${x.body.length} bytes`;
    const contentType = String(x.headers['content-type'] ?? '');
    const mediaType = contentType.split(';')[0]!.trim().toLowerCase();
    const key = Object.keys(content).find((k) => k.split(';')[0]!.trim().toLowerCase() === mediaType);
    if (key === undefined) return `content-type "${contentType}" is not one of ${Object.keys(content).join(', ')}`;
    // A HEAD answer has no body to check.
    if (x.method.toUpperCase() === 'HEAD') return null;
    const schemaPointer = `${pointer}/content/${escape(key)}/schema`;
    if (mediaType === 'application/json' || mediaType.endsWith('+json')) {
      let body: unknown;
      try {
        body = JSON.parse(x.body.toString('utf8'));
      } catch {
        return `the body is not JSON: ${JSON.stringify(x.body.toString('utf8').slice(0, 200))}`;
      }
      const validate = this.validator(schemaPointer);
      if (!validate(body)) return `${describe(validate.errors)}; body ${JSON.stringify(body).slice(0, 300)}`;
      return null;
    }
    const linePointer = opPointer === undefined ? undefined : `${opPointer}/x-svcq-line-schema`;
    if (linePointer !== undefined && this.at(linePointer) !== undefined) return this.linesMismatch(x, linePointer);
    return null;
  }

  /** Each whole line of a day-file or log must be one JSON value of the operation's line schema (a tail may start mid-line). */
  private linesMismatch(x: Exchange, pointer: string): string | null {
    const lines = x.body.toString('utf8').split('\n');
    lines.pop();
    const validate = this.validator(pointer);
    for (const [n, line] of lines.entries()) {
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        if (n === 0 && x.status === 206) continue;
        return `line ${n + 1} is not JSON: ${JSON.stringify(line.slice(0, 200))}`;
      }
      if (!validate(value)) return `line ${n + 1}: ${describe(validate.errors)}; ${line.slice(0, 300)}`;
    }
    return null;
  }
}

let shared: OpenApiDescription | undefined;

/** docs/openapi.yaml, read once per process. */
export function openApi(): OpenApiDescription {
  return (shared ??= OpenApiDescription.load());
}

/** Throws when the answer is not one docs/openapi.yaml gives for the request. */
export function checkAnswer(x: Exchange): void {
  const problem = openApi().mismatch(x);
  if (problem) throw new Error(`the answer does not fit docs/openapi.yaml: ${problem}`);
}

/** The path the server routes a target by: its path without the query, the path of an absolute-form URL. */
function pathOf(target: string): string {
  let path = target;
  if (!target.startsWith('/')) {
    const scheme = /^https?:\/\//i.exec(target);
    const rest = scheme ? target.slice(scheme[0].length) : '';
    const cut = Math.min(...['/', '?'].map((c) => (rest.includes(c) ? rest.indexOf(c) : rest.length)));
    // Userinfo, a fragment, or no http URL at all: the server routes it as a path of no route.
    if (!scheme || rest.slice(0, cut).includes('@') || rest.includes('#')) return '/-';
    path = rest.slice(cut) || '/';
    if (path.startsWith('?')) path = `/${path}`;
  }
  const query = path.indexOf('?');
  return query === -1 ? path : path.slice(0, query);
}

function isApiPath(pathname: string): boolean {
  return pathname === '/api' || pathname.startsWith('/api/');
}

function decoded(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/** A JSON pointer token. */
function escape(token: string): string {
  return token.replace(/~/g, '~0').replace(/\//g, '~1');
}

function describe(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? []).map((e) => `${e.instancePath || 'the value'} ${e.message ?? 'is invalid'}${e.params && Object.keys(e.params).length ? ` (${JSON.stringify(e.params)})` : ''}`).join(', ');
}
