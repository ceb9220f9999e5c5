import { expect } from 'chai';
import { createHmac } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { PushTarget } from '../support/push-target.js';
import { suiteDatabase } from '../store/support/stores.js';
import type { Json, QueueApi } from '../http/queue-api.js';

/**
 * Several nodes for the calling suite (decisions §6.1): `count` real `svcq serve` processes on one
 * fresh PostgreSQL database, each allowed to call one real {@link PushTarget}, started before its
 * tests and killed after. Where no PostgreSQL answers, the suite is skipped with one line saying why.
 */
export function nodesAndTarget(count: number, masterToken: string): { nodes: TestServer[]; target: () => PushTarget } {
  const nodes: TestServer[] = [];
  let target: PushTarget | undefined;
  suiteDatabase({
    setUp: async ({ url }) => {
      target = await PushTarget.start();
      nodes.push(...(await Promise.all(Array.from({ length: count }, () => startServer({ masterToken, args: ['--store', url, '--push-allow', `${target!.url}/`] })))));
    },
    tearDown: async () => {
      for (const n of nodes) await n.kill9();
      for (const n of nodes) cleanupTemp(n.root);
      await target?.stop();
    },
  });
  return { nodes, target: () => target! };
}

/** A push queue's task events from the server's history (its readers flush it first), for one item or all. */
export async function taskEvents(server: TestServer, host: string, queue: string, id?: string): Promise<Json[]> {
  const today = new Date().toISOString().slice(0, 10);
  const reply = await request(server.url, `/api/v2/tasks/file?name=tasks-${today}.log`, { token: server.masterToken });
  if (reply.status === 404) return [];
  expect(reply.status, reply.text).to.equal(200);
  return reply.text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Json)
    .filter((e) => e.host === host && e.queue === queue && (id === undefined || e.id === id));
}

/** The queue view (`GET /api/v2/queues/<host>/<name>`). */
export async function queueView(server: TestServer, q: QueueApi): Promise<Json> {
  const reply = await request(server.url, `/api/v2/queues/${q.host}/${q.name}`, { token: server.masterToken });
  expect(reply.status, reply.text).to.equal(200);
  return reply.json as Json;
}

/** The value of one series of the exposition, or undefined when absent. */
export async function metric(server: TestServer, line: string): Promise<number | undefined> {
  const text = (await request(server.url, '/api/v2/metrics', { token: server.masterToken })).text;
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.split(' ').pop());
}

/** Whether the headers carry a valid v1 signature of `body` under `secret`, checked as a receiver would (decisions §9.1). */
export function signatureChecks(headers: IncomingHttpHeaders, body: string, secret: string): boolean {
  const timestamp = headers['svcq-timestamp'];
  const signature = headers['svcq-signature'];
  if (typeof timestamp !== 'string' || typeof signature !== 'string') return false;
  const expected = `v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
  return signature === expected && Math.abs(Date.now() / 1000 - Number(timestamp)) < 300;
}

/** The item's record once it is terminal (a held fetch, decisions §3.6), or its last record after `seconds`. */
export async function terminal(q: QueueApi, id: string, seconds = 20): Promise<Json> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const record = await q.fetch(id, `?wait=${Math.min(30, Math.max(1, Math.ceil((deadline - Date.now()) / 1000)))}`);
    if (['finished', 'failed', 'timedout', 'cancelled'].includes(record.status as string) || Date.now() >= deadline) return record;
  }
}

/** The item's record once `done` holds for it; polls only between task events of the item (looks again at most every 50 ms). */
export async function until(q: QueueApi, id: string, done: (record: Json) => boolean, seconds = 20): Promise<Json> {
  return q.until(id, done, seconds * 1000);
}
