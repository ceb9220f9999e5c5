import { expect } from 'chai';
import { request, type Reply } from '../support/http.js';
import type { TestServer } from '../support/server.js';

/** GET a tools endpoint with the master token. */
export function tools(server: TestServer, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return request(server.url, `/api/v2/${path}`, { token: server.masterToken, headers });
}

/** Polls `check` until it returns a value (not undefined), or fails after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Stores a queue definition through the management API. */
export async function putQueue(server: TestServer, host: string, name: string, definition: object): Promise<void> {
  const reply = await request(server.url, `/api/v2/def?path=${host}/svc-queues/${name}.json`, { method: 'PUT', token: server.masterToken, body: JSON.stringify(definition) });
  expect(reply.status, reply.text).to.equal(200);
}

/** A malformed parameter gets 400 `{ error }` with a sentence, never a file (decisions §5). */
export function expectBadRequest(reply: Reply, what: string): void {
  expect(reply.status, `${what}: ${reply.text}`).to.equal(400);
  const body = reply.json as { error?: unknown };
  expect(body.error, what).to.be.a('string').and.not.equal('');
}

/** The empty 200 that stands for an absent file (interface §4.6). */
export function expectEmpty200(reply: Reply, what: string): void {
  expect(reply.status, `${what}: ${reply.text}`).to.equal(200);
  expect(reply.body.length, what).to.equal(0);
  expect(reply.headers['content-type'], what).to.equal('application/octet-stream');
}

/** `{ name: number }` fields check, with a readable failure. */
export function expectIntegers(record: Record<string, unknown>, fields: string[], where: string): void {
  for (const field of fields) expect(Number.isInteger(record[field]), `${where}.${field} = ${JSON.stringify(record[field])}`).to.equal(true);
}

export function today(): string {
  return new Date().toISOString().slice(0, 10);
}
