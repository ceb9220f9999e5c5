import { readFileSync } from 'node:fs';
import { compileErrors, validate } from '@readme/openapi-parser';
import { expect } from 'chai';
import { parse } from 'yaml';
import { parseDefinitionPath } from '../../src/definitions/names.js';
import { parseDefinition } from '../../src/definitions/schemas.js';
import { CLAIM_REQUEST_SCHEMA } from '../../src/protocol.js';
import { OPENAPI_FILE, OpenApiDescription, type Exchange } from '../support/openapi-check.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- a parsed document, walked and changed freely

/** A fresh copy of docs/openapi.yaml, to read or to break. */
function documentCopy(): Json {
  return parse(readFileSync(OPENAPI_FILE, 'utf8')) as Json;
}

/** The validator's verdict, with its errors in words. */
async function verdict(doc: Json): Promise<{ valid: boolean; errors: string }> {
  const result = await validate(structuredClone(doc) as Parameters<typeof validate>[0]);
  return { valid: result.valid, errors: result.valid ? '' : compileErrors(result) };
}

/** Every JSON schema of the document with its pointer: component schemas, parameter, header and media-type schemas. */
function schemaPointers(doc: Json): string[] {
  const out: string[] = [];
  const walk = (value: unknown, pointer: string, key: string | undefined): void => {
    if (typeof value !== 'object' || value === null) return;
    // Inside a schema everything is schema: the walk stops at the outermost one.
    if (key === 'schema' || key === 'x-svcq-line-schema' || /^\/components\/schemas\/[^/]+$/.test(pointer)) {
      out.push(pointer);
      return;
    }
    for (const [k, v] of Object.entries(value)) walk(v, `${pointer}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, k);
  };
  walk(doc, '', undefined);
  return out;
}

/** A schema with its `$ref`s followed and its annotations (words for readers) left out: what it checks. */
function checks(schema: unknown, doc: Json): unknown {
  if (Array.isArray(schema)) return schema.map((s) => checks(s, doc));
  if (typeof schema !== 'object' || schema === null) return schema;
  const s = schema as Json;
  if (typeof s.$ref === 'string') return checks(new OpenApiDescription(doc).at(s.$ref.slice(1)), doc);
  const out: Json = {};
  for (const [k, v] of Object.entries(s)) {
    if (['description', 'example', 'examples', 'default', 'title', '$comment'].includes(k)) continue;
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v as Json).map(([p, ps]) => [p, checks(ps, doc)])) : checks(v, doc);
  }
  return out;
}

describe('docs/openapi.yaml: the OpenAPI 3.1 description of every endpoint', () => {
  it('is a valid OpenAPI 3.1 document: the 3.1 schema, every $ref resolves, path parameters declared, operation ids unique (@readme/openapi-parser)', async () => {
    const doc = documentCopy();
    expect(doc.openapi).to.match(/^3\.1\./);
    const { valid, errors } = await verdict(doc);
    expect(valid, errors).to.equal(true);
  });

  const breakages: Array<[string, (doc: Json) => void]> = [
    ['a response without its description', (doc) => delete doc.paths['/{queue}'].post.responses['200'].description],
    ['a $ref to a schema that does not exist', (doc) => (doc.paths['/api/v2/manifest'].get.responses['200'].content['application/json'].schema.$ref = '#/components/schemas/Nothing')],
    ['a path parameter that is not declared', (doc) => (doc.paths['/{queue}/items/{id}'].parameters = doc.paths['/{queue}/items/{id}'].parameters.slice(0, 2))],
    ['two operations with one id', (doc) => (doc.paths['/api/v2/logs'].get.operationId = 'getManifest')],
    ['a status that is not one', (doc) => (doc.paths['/api/v2/logs'].get.responses['2000'] = { description: 'no such status' })],
  ];
  for (const [what, breakIt] of breakages) {
    it(`the validator refuses the document with ${what}: the check can fail`, async () => {
      const doc = documentCopy();
      breakIt(doc);
      expect((await verdict(doc)).valid).to.equal(false);
    });
  }

  it('every schema in it compiles as JSON Schema 2020-12 with no unknown keyword (OpenAPI 3.1 schemas are 2020-12), and one with a typo does not', () => {
    const doc = documentCopy();
    const description = new OpenApiDescription(doc);
    const pointers = schemaPointers(doc);
    expect(pointers.length).to.be.greaterThan(60);
    for (const pointer of pointers) expect(() => description.validator(pointer), pointer).not.to.throw();

    for (const typo of [{ type: 'strin' }, { type: 'integer', minimun: 0 }, { $ref: '#/components/schemas/Nothing' }]) {
      const broken = documentCopy();
      broken.components.schemas.Lease.properties.until = typo;
      expect(() => new OpenApiDescription(broken).validator('/components/schemas/Lease'), JSON.stringify(typo)).to.throw();
    }
  });

  it('every example in it fits the schema beside it', () => {
    const doc = documentCopy();
    const description = new OpenApiDescription(doc);
    let examples = 0;
    for (const pointer of schemaPointers(doc)) {
      const schema = description.at(pointer) as Json;
      const parent = description.at(pointer.slice(0, pointer.lastIndexOf('/'))) as Json;
      // A media type's or parameter's example sits beside its schema; a component schema's inside it.
      const example = pointer.startsWith('/components/schemas/') ? schema.example : parent.example;
      if (example === undefined) continue;
      examples += 1;
      const check = description.validator(pointer);
      expect(check(example), `${pointer}: ${JSON.stringify(check.errors)}`).to.equal(true);
    }
    expect(examples).to.be.greaterThan(10);
  });

  it("the claim request's schema checks exactly what the server's does (src/protocol.ts CLAIM_REQUEST_SCHEMA), words for readers aside", () => {
    const doc = documentCopy();
    expect(checks(doc.components.schemas.ClaimRequest, doc)).to.deep.equal(CLAIM_REQUEST_SCHEMA);
  });

  it('the queue and user definition schemas accept and refuse what a definition PUT does (decisions §2.2, §2.3)', () => {
    const doc = documentCopy();
    const description = new OpenApiDescription(doc);
    const queueSchema = description.validator('/components/schemas/QueueDefinition');
    const userSchema = description.validator('/components/schemas/UserDefinition');
    const server = (path: string, value: unknown): boolean => {
      const at = parseDefinitionPath(path);
      if ('error' in at) throw new Error(at.error);
      return !('error' in parseDefinition(at, JSON.stringify(value)));
    };
    const queues: unknown[] = [
      {},
      { leaseSeconds: 1, maxAttempts: 1, retryDelaySeconds: 0, timeoutSeconds: 1, retainFrom: 'finished', retainSeconds: 0 },
      { leaseSeconds: 86400, maxAttempts: 1000, retryDelaySeconds: 86400, timeoutSeconds: 1e12, retainFrom: 'fetched', retainSeconds: 1e12 },
      { timeoutSeconds: null, 'svc-queue-archivePayloads': true, description: 'thumbnails' },
      { access: { post: 'public', fetch: ['shop', 'ops'], work: [] } },
      { schema: true },
      { schema: { type: 'object', required: ['src'] } },
      { leaseSeconds: 0 },
      { leaseSeconds: 86401 },
      { leaseSeconds: 1.5 },
      { leaseSeconds: '60' },
      { maxAttempts: 0 },
      { maxAttempts: 1001 },
      { retryDelaySeconds: -1 },
      { retryDelaySeconds: 86401 },
      { timeoutSeconds: 0 },
      { timeoutSeconds: 1e12 + 1 },
      { retainFrom: 'never' },
      { retainSeconds: -1 },
      { retainSeconds: 1e12 + 1 },
      { 'svc-queue-archivePayloads': 'yes' },
      { access: { post: 'everyone' } },
      { access: { read: 'public' } },
      { access: { post: ['public'] } },
      { access: { post: ['shop', 'shop'] } },
      { access: { post: ['Shop'] } },
      { access: 'public' },
      { schema: 'object' },
      { description: 1 },
      { priority: 1 },
      // decisions §8.5, §8.6
      { maxActive: 1, groupMaxActive: 1000000, rateLimit: { max: 10, perSeconds: 86400 }, fairness: 'groups', deadLetter: 'q-dead' },
      { maxActive: 0 },
      { groupMaxActive: 1.5 },
      { rateLimit: { max: 10 } },
      { rateLimit: { max: 10, perSeconds: 86401 } },
      { rateLimit: { max: 10, perSeconds: 1, burst: 2 } },
      { fairness: 'random' },
      { deadLetter: 'Dead' },
      [],
      'queue',
    ];
    for (const value of queues) {
      expect(queueSchema(value), `queue ${JSON.stringify(value)}`).to.equal(server('h.example/svc-queues/q.json', value));
    }
    const token = 'a'.repeat(64);
    const users: unknown[] = [
      { 'svc-user-name': 'u', tokenSha256: token },
      { 'svc-user-name': 'u' },
      { tokenSha256: token },
      { 'svc-user-name': 'u', tokenSha256: token.toUpperCase() },
      { 'svc-user-name': 'u', tokenSha256: token.slice(1) },
      { 'svc-user-name': 'u', tokenSha256: token, token: 'secret' },
      { 'svc-user-name': 1, tokenSha256: token },
      [],
    ];
    for (const value of users) {
      expect(userSchema(value), `user ${JSON.stringify(value)}`).to.equal(server('h.example/svc-users/u.json', value));
    }
  });

  it('every operation but a preflight lists the wall as its 404 (interface §5.3), and every 2xx answer with a body has a schema for it', () => {
    const doc = documentCopy();
    const description = new OpenApiDescription(doc);
    /** The pointer of a response, its reference followed. */
    const response = (pointer: string): string => {
      const ref = (description.at(pointer) as Json).$ref;
      return typeof ref === 'string' ? ref.slice(1) : pointer;
    };
    for (const operation of description.operations()) {
      const [method, template] = operation.split(' ') as [string, string];
      if (method === 'OPTIONS') continue;
      const op = `/paths/${template.replace(/\//g, '~1')}/${method.toLowerCase()}`;
      const notFound = description.validator(`${response(`${op}/responses/404`)}/content/application~1json/schema`);
      expect(notFound({ error: 'not found' }), `${operation}: the wall fits its 404`).to.equal(true);
      for (const status of Object.keys(doc.paths[template][method.toLowerCase()].responses as Json).filter((s) => s.startsWith('2'))) {
        const content = (description.at(response(`${op}/responses/${status}`)) as Json).content as Json | undefined;
        for (const [type, media] of Object.entries(content ?? {})) expect((media as Json).schema, `${operation} ${status} ${type}`).to.be.an('object');
      }
    }
  });
});

describe('the answer check of the black-box tests (test/support/openapi-check.ts)', () => {
  const description = OpenApiDescription.load();
  const json = (status: number, body: unknown, extra: Record<string, string> = {}): Pick<Exchange, 'status' | 'headers' | 'body'> => ({
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'access-control-allow-origin': '*', ...extra },
    body: Buffer.from(JSON.stringify(body)),
  });
  const wall = json(404, { error: 'not found' });
  /** Fails with the check's whole sentence, which chai would cut short. */
  const fits = (x: Exchange): void => {
    const problem = description.mismatch(x);
    if (problem) expect.fail(problem);
  };

  it('takes answers the description gives: a post, a status record, the wall on any operation', () => {
    fits({ method: 'POST', target: '/resize', ...json(200, { ok: true, id: '0123456789abcdef', status: 'pending' }) });
    const record = { ok: true, id: '0123456789abcdef', status: 'finished', postedBy: 'public', postedAt: 1, updatedAt: 2, finishedAt: 2, attempts: 1, priority: 0, group: null, runAt: null, progress: null, result: { output: 'x' }, error: null };
    fits({ method: 'GET', target: '/resize/items/0123456789abcdef?wait=5', ...json(200, record) });
    fits({ method: 'GET', target: '/api/v2/manifest', ...wall });
    fits({ method: 'POST', target: 'http://jobs.example.com/resize/claim', ...json(200, { ok: true, empty: true }) });
  });

  it('fails an answer whose status the operation does not list', () => {
    expect(description.mismatch({ method: 'GET', target: '/api/v2/manifest', ...json(400, { error: 'no' }) })).to.match(/answered 400, which the description does not list/);
    expect(description.mismatch({ method: 'POST', target: '/resize', ...json(500, { error: 'internal server error' }) })).to.match(/does not list/);
  });

  it('fails a body of another shape, another content type, or a field the description does not have', () => {
    expect(description.mismatch({ method: 'POST', target: '/resize', ...json(200, { ok: true, id: 'xyz', status: 'pending' }) })).to.match(/\/id must match pattern/);
    expect(description.mismatch({ method: 'POST', target: '/resize', ...json(200, { ok: true, id: '0123456789abcdef', status: 'pending', extra: 1 }) })).to.match(/additional properties/);
    expect(description.mismatch({ method: 'GET', target: '/api/version', status: 200, headers: { 'content-type': 'text/html' }, body: Buffer.from('<p>hi</p>') })).to.match(/content-type "text\/html"/);
    expect(description.mismatch({ method: 'GET', target: '/api/v2/manifest', ...json(404, { error: 'no such thing' }) })).to.match(/must be equal to constant/);
  });

  it('a route the description does not have must get the wall; a queue-domain preflight 204; another API version 426', () => {
    fits({ method: 'GET', target: '/api/v2/nothing', ...wall });
    expect(description.mismatch({ method: 'GET', target: '/api/v2/nothing', ...json(200, {}) })).to.match(/must get Wall \(404\)/);
    fits({ method: 'DELETE', target: '/api/v2/manifest', ...wall });
    fits({ method: 'GET', target: '/resize/CLAIM', ...wall });
    fits({ method: 'GET', target: '/api/v1/manifest', ...json(426, { error: 'this server speaks /api/v2', api: 2 }) });
    expect(description.mismatch({ method: 'GET', target: '/api/v2/manifest/', ...json(426, { error: 'this server speaks /api/v2', api: 2 }) })).to.match(/must get Wall/);
    const preflight = { 'access-control-allow-origin': '*', 'access-control-allow-methods': 'GET,POST,OPTIONS', 'access-control-allow-headers': 'authorization,content-type,idempotency-key,range', 'access-control-max-age': '600' };
    fits({ method: 'OPTIONS', target: '/a/b/c/d/e/f', status: 204, headers: preflight, body: Buffer.alloc(0) });
    expect(description.mismatch({ method: 'OPTIONS', target: '/resize', status: 204, headers: { ...preflight, 'access-control-allow-methods': 'GET' }, body: Buffer.alloc(0) })).to.match(/Access-Control-Allow-Methods/);
  });

  it('a tools file answer needs its headers, and each whole line must fit the line schema', () => {
    const file = (status: number, text: string, extra: Record<string, string> = {}): Pick<Exchange, 'status' | 'headers' | 'body'> => ({
      status,
      headers: { 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes', ...extra },
      body: Buffer.from(text),
    });
    const line = JSON.stringify({ ts: 1, host: 'h', queue: 'q', id: '0123456789abcdef', event: 'posted', attempts: 0, status: 'pending' });
    const target = '/api/v2/tasks/file?name=tasks-2026-01-01.log';
    fits({ method: 'GET', target, ...file(200, `${line}\n${line}\n`) });
    fits({ method: 'GET', target, ...file(200, '') });
    fits({ method: 'GET', target, ...file(206, `ue":"q"}\n${line}\n`, { 'content-range': 'bytes 5-100/101' }) });
    expect(description.mismatch({ method: 'GET', target, ...file(206, `${line}\n`) })).to.match(/header Content-Range is missing/);
    expect(description.mismatch({ method: 'GET', target, ...file(200, `${line.replace('posted', 'teleported')}\n`) })).to.match(/line 1/);
  });

  it('a schema broken in the description fails the answers that fit the real one: the check can fail', () => {
    const doc = documentCopy();
    doc.components.schemas.SubmissionAnswer.properties.accepted = { type: 'string' };
    const broken = new OpenApiDescription(doc);
    const answer = { method: 'POST', target: '/resize/items/0123456789abcdef/result', ...json(200, { ok: true, accepted: true, status: 'finished' }) };
    fits(answer);
    expect(broken.mismatch(answer)).to.match(/\/accepted must be string/);
  });
});
