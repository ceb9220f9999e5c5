import { createHash } from 'node:crypto';
import http from 'node:http';
import { expect } from 'chai';
import { request, type Reply } from '../support/http.js';
import { checkAnswer } from '../support/openapi-check.js';
import type { TestServer } from '../support/server.js';

/**
 * Small helpers for the black-box queue tests: define queues and users through the management
 * API, and speak the producer and worker endpoints with a chosen Host header and token.
 */

let counter = 0;

/** A queue name no other test uses. */
export function uniqueName(prefix = 'q'): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export async function putDef(server: TestServer, defPath: string, body: unknown): Promise<void> {
  const reply = await request(server.url, `/api/v2/def?path=${encodeURIComponent(defPath)}`, { method: 'PUT', token: server.masterToken, body: JSON.stringify(body) });
  expect(reply.status, `PUT ${defPath}: ${reply.text}`).to.equal(200);
}

export async function deleteDef(server: TestServer, defPath: string): Promise<void> {
  const reply = await request(server.url, `/api/v2/def?path=${encodeURIComponent(defPath)}`, { method: 'DELETE', token: server.masterToken });
  expect(reply.status, `DELETE ${defPath}: ${reply.text}`).to.equal(200);
}

export function defineQueue(server: TestServer, host: string, name: string, def: Record<string, unknown>): Promise<void> {
  return putDef(server, `${host}/svc-queues/${name}.json`, def);
}

/** Defines a user of `host` whose token is `token`. */
export function defineUser(server: TestServer, host: string, name: string, token: string): Promise<void> {
  return putDef(server, `${host}/svc-users/${name}.json`, { 'svc-user-name': name, tokenSha256: sha256Hex(token) });
}

export const PUBLIC_ACCESS = { post: 'public', fetch: 'public', work: 'public' } as const;

export interface Call {
  host: string;
  token?: string;
  headers?: Record<string, string>;
}

export interface Json {
  [key: string]: unknown;
}

function bodyOf(reply: Reply): Json {
  return (reply.json ?? {}) as Json;
}

/** A queue on one host, spoken to like a producer and a worker would. */
export class QueueApi {
  constructor(
    readonly server: TestServer,
    readonly host: string,
    readonly name: string,
    readonly token?: string,
  ) {}

  raw(method: string, path: string, body?: string, extra: Partial<Call> = {}): Promise<Reply> {
    return request(this.server.url, path, {
      method,
      host: extra.host ?? this.host,
      token: extra.token ?? this.token,
      headers: extra.headers,
      body,
    });
  }

  postRaw(item: unknown, extra: Partial<Call> = {}): Promise<Reply> {
    return this.raw('POST', `/${this.name}`, typeof item === 'string' ? item : JSON.stringify(item), extra);
  }

  /** Posts and expects 200; returns the new id. */
  async post(item: unknown, extra: Partial<Call> = {}): Promise<string> {
    const reply = await this.postRaw(item, extra);
    expect(reply.status, reply.text).to.equal(200);
    const body = bodyOf(reply);
    expect(body.ok).to.equal(true);
    expect(body.status).to.equal('pending');
    return body.id as string;
  }

  claimRaw(body: unknown = {}, extra: Partial<Call> = {}): Promise<Reply> {
    return this.raw('POST', `/${this.name}/claim`, typeof body === 'string' ? body : JSON.stringify(body), extra);
  }

  async claim(body: unknown = {}, extra: Partial<Call> = {}): Promise<Json> {
    const reply = await this.claimRaw(body, extra);
    expect(reply.status, reply.text).to.equal(200);
    return bodyOf(reply);
  }

  fetchRaw(id: string, query = '', extra: Partial<Call> = {}): Promise<Reply> {
    return this.raw('GET', `/${this.name}/items/${id}${query}`, undefined, extra);
  }

  async fetch(id: string, query = ''): Promise<Json> {
    const reply = await this.fetchRaw(id, query);
    expect(reply.status, reply.text).to.equal(200);
    return bodyOf(reply);
  }

  submitRaw(id: string, kind: 'progress' | 'result' | 'error' | 'cancel', record?: unknown, extra: Partial<Call> = {}): Promise<Reply> {
    return this.raw('POST', `/${this.name}/items/${id}/${kind}`, record === undefined ? undefined : JSON.stringify(record), extra);
  }

  async submit(id: string, kind: 'progress' | 'result' | 'error' | 'cancel', record?: unknown): Promise<Json> {
    const reply = await this.submitRaw(id, kind, record);
    expect(reply.status, reply.text).to.equal(200);
    return bodyOf(reply);
  }

  /** Polls the fetch endpoint until `done` holds for the status record, or fails after `timeoutMs`. */
  async until(id: string, done: (record: Json) => boolean, timeoutMs = 5000): Promise<Json> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const record = await this.fetch(id);
      if (done(record)) return record;
      if (Date.now() > deadline) throw new Error(`item ${id} never reached the expected state; last: ${JSON.stringify(record)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** Creates a public queue (unless `def.access` says otherwise) with a fresh name on `host`. */
export async function newQueue(server: TestServer, host: string, def: Record<string, unknown> = {}, token?: string): Promise<QueueApi> {
  const name = uniqueName();
  await defineQueue(server, host, name, { access: PUBLIC_ACCESS, ...def });
  return new QueueApi(server, host, name, token);
}

/** A keep-alive agent for tests that make many requests at once. */
export function keepAliveAgent(maxSockets: number): http.Agent {
  return new http.Agent({ keepAlive: true, maxSockets });
}

/** One JSON request over `agent`; resolves with status and parsed body, once the answer is checked against docs/openapi.yaml. */
export function agentRequest(agent: http.Agent, baseUrl: string, path: string, options: { method?: string; host: string; body?: string }): Promise<{ status: number; json: Json }> {
  const base = new URL(baseUrl);
  const headers: Record<string, string> = { host: options.host };
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(options.body));
  }
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: base.hostname, port: base.port, path, method: options.method ?? 'GET', headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        const text = body.toString('utf8');
        try {
          checkAnswer({ method: options.method ?? 'GET', target: path, status: res.statusCode ?? 0, headers: res.headers, body });
        } catch (err) {
          reject(err as Error);
          return;
        }
        try {
          resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Json });
        } catch {
          reject(new Error(`not JSON (${res.statusCode}): ${text}`));
        }
      });
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** Runs `tasks` with at most `limit` in flight, keeping their order in the result. */
export async function pool<T>(count: number, limit: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(count);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      out[i] = await task(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, lane));
  return out;
}
