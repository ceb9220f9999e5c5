import { expect } from 'chai';
import { request, stableHeaders, type Reply } from '../support/http.js';
import { serverForSuite, type TestServer } from '../support/server.js';
import { newQueue, QueueApi, uniqueName, defineQueue, PUBLIC_ACCESS, type Json } from './queue-api.js';

/**
 * Flow control as operators and workers meet it over HTTP (decisions §8.5, §8.6), as a black box:
 * the bulk actions' endpoints, held claims answered when a lease ends or the rate window moves on,
 * `Retry-After`, `svcq_claims_held_total`, and the queue view's limits.
 */

const HOST = 'flow.example.com';

function bulk(server: TestServer, host: string, name: string, action: 'redrive' | 'retry' | 'cancel', body?: unknown, token: string | null = server.masterToken): Promise<Reply> {
  return request(server.url, `/api/v2/queues/${host}/${name}/${action}`, { method: 'POST', token: token ?? undefined, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
}

async function view(server: TestServer, q: QueueApi): Promise<Json> {
  const reply = await request(server.url, `/api/v2/queues/${q.host}/${q.name}`, { token: server.masterToken });
  expect(reply.status, reply.text).to.equal(200);
  return reply.json as Json;
}

/** The value of one series of the exposition, or undefined when it is not there. */
async function metric(server: TestServer, line: string): Promise<number | undefined> {
  const text = (await request(server.url, '/api/v2/metrics', { token: server.masterToken })).text;
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found === undefined ? undefined : Number(found.split(' ').pop());
}

async function postMany(q: QueueApi, n: number): Promise<void> {
  for (let done = 0; done < n; done += 1000) {
    const items = Array.from({ length: Math.min(1000, n - done) }, (_, i) => ({ n: done + i }));
    const reply = await q.raw('POST', `/${q.name}/batch`, JSON.stringify(items));
    expect(reply.status, reply.text).to.equal(200);
  }
}

describe('bulk actions over HTTP: who may, which queue, which body (decisions §8.6, black box)', function () {
  this.timeout(60_000);
  const server = serverForSuite();

  it('each answers an undefined host/name pair 404 { error: "no such queue" } with the master token, and anything else denied with the wall, byte for byte', async () => {
    const q = await newQueue(server, HOST);
    const wall = await request(server.url, '/api/v2/no-such-route', { token: server.masterToken });
    for (const action of ['redrive', 'retry', 'cancel'] as const) {
      for (const [host, name] of [[HOST, 'no-such-queue'], ['nowhere.example.com', q.name]] as const) {
        const reply = await bulk(server, host, name, action, {});
        expect(reply.status).to.equal(404);
        expect(reply.text).to.equal('{"error":"no such queue"}');
        // The pair is looked at before the body: an undefined one with a bad body is still 404.
        expect((await bulk(server, host, name, action, { max: 0 })).status).to.equal(404);
      }
      for (const [token, what] of [[null, 'no token'], ['not-the-master-token', 'a wrong token']] as const) {
        const reply = await bulk(server, HOST, q.name, action, {}, token);
        expect(reply.status, what).to.equal(404);
        expect(stableHeaders(reply), what).to.deep.equal(stableHeaders(wall));
        expect(reply.text, what).to.equal(wall.text);
      }
      // Not on the queue domain, and not by GET.
      expect((await request(server.url, `/${q.name}/${action}`, { method: 'POST', host: HOST, body: '{}' })).text).to.equal(wall.text);
      expect((await request(server.url, `/api/v2/queues/${HOST}/${q.name}/${action}`, { token: server.masterToken })).text).to.equal(wall.text);
    }
  });

  it('a bad body is 400 { error } naming the field, and nothing is changed (decisions §8.6)', async () => {
    const q = await newQueue(server, HOST);
    const ids = [await q.post({ n: 1 }), await q.post({ n: 2 })];
    const cases: Array<[action: 'redrive' | 'retry' | 'cancel', body: string, names: string]> = [
      ['cancel', '{"max":0}', 'max'],
      ['cancel', '{"max":100001}', 'max'],
      ['cancel', '{"max":1.5}', 'max'],
      ['cancel', '{"max":"10"}', 'max'],
      ['cancel', '{"status":["finished"]}', 'status'],
      ['cancel', '{"status":[]}', 'status'],
      ['cancel', '{"status":"pending"}', 'status'],
      ['cancel', '{"everything":true}', 'everything'],
      ['retry', '{"status":["pending"]}', 'status'],
      ['retry', '{"max":-1}', 'max'],
      ['redrive', '{"status":["failed"]}', 'status'],
      ['redrive', '{"max":null}', 'max'],
      ['cancel', '[]', 'JSON object'],
      ['cancel', 'cancel them all', 'not valid JSON'],
    ];
    for (const [action, body, names] of cases) {
      const reply = await bulk(server, HOST, q.name, action, body);
      expect(reply.status, `${action} ${body}`).to.equal(400);
      const error = (reply.json as { error: string }).error;
      expect(Object.keys(reply.json as Json), `${action} ${body}`).to.deep.equal(['error']);
      expect(error, `${action} ${body}`).to.include(names);
    }
    for (const id of ids) expect((await q.fetch(id)).status).to.equal('pending');
  });
});

describe('bulk actions change items in batches (decisions §8.6, black box; needs Store.bulk)', function () {
  this.timeout(120_000);
  const server = serverForSuite();

  it('cancel takes pending items oldest first, up to max, past the 1,000 of one batch, and says whether more are left; retry makes them pending again in place', async () => {
    const q = await newQueue(server, HOST);
    await postMany(q, 1200);
    const first = await bulk(server, HOST, q.name, 'cancel', { max: 1100 });
    expect(first.status, first.text).to.equal(200);
    expect(first.json).to.deep.equal({ cancelled: 1100, more: true });
    expect((await bulk(server, HOST, q.name, 'cancel', {})).json).to.deep.equal({ cancelled: 100, more: false });
    expect((await bulk(server, HOST, q.name, 'cancel', {})).json).to.deep.equal({ cancelled: 0, more: false });
    expect(((await view(server, q)).counts as Json).cancelled).to.equal(1200);
    // Failed and timed-out by default: cancelled items only when named.
    expect((await bulk(server, HOST, q.name, 'retry')).json).to.deep.equal({ retried: 0, more: false });
    expect((await bulk(server, HOST, q.name, 'retry', { status: ['cancelled'], max: 100000 })).json).to.deep.equal({ retried: 1200, more: false });
    const claimed = await q.claim({ worker: 'w' });
    // In place: the oldest comes first again, its attempts from 0.
    expect(claimed.item).to.deep.equal({ n: 0 });
    expect(claimed.attempts).to.equal(1);
  });

  it('cancel with status takes leased items too; retry takes failed ones (attempts 0, finishedAt null)', async () => {
    const q = await newQueue(server, HOST, { maxAttempts: 1 });
    const [a, b] = [await q.post({ n: 'a' }), await q.post({ n: 'b' })];
    await q.claim({ worker: 'w' });
    expect((await bulk(server, HOST, q.name, 'cancel', {})).json).to.deep.equal({ cancelled: 1, more: false });
    expect((await q.fetch(a)).status).to.equal('claimed');
    expect((await bulk(server, HOST, q.name, 'cancel', { status: ['claimed', 'processing'] })).json).to.deep.equal({ cancelled: 1, more: false });
    expect((await q.fetch(a)).status).to.equal('cancelled');
    const c = await q.post({ n: 'c' });
    await q.claim({ worker: 'w' });
    expect((await q.submit(c, 'error', { why: 'x' })).status).to.equal('failed');
    expect((await bulk(server, HOST, q.name, 'retry', {})).json).to.deep.equal({ retried: 1, more: false });
    expect(await q.fetch(c)).to.include({ status: 'pending', attempts: 0, finishedAt: null });
    expect((await q.fetch(b)).status).to.equal('cancelled');
  });

  it('an item that fails in a queue with deadLetter is copied there (deadLetterId, source); redrive sends it back as a new item and removes the dead letter', async () => {
    const dead = uniqueName('dead');
    await defineQueue(server, HOST, dead, { access: PUBLIC_ACCESS });
    const q = await newQueue(server, HOST, { maxAttempts: 1, deadLetter: dead });
    const letters = new QueueApi(server, HOST, dead);
    const id = await q.post({ to: 'ann' });
    await q.claim({ worker: 'w' });
    await q.submit(id, 'error', { reason: 'smtp timeout' });
    const original = await q.fetch(id);
    expect(original.status).to.equal('failed');
    const copyId = original.deadLetterId as string;
    expect(copyId).to.match(/^[0-9a-f]{16}$/);
    const copy = await letters.fetch(copyId);
    expect(copy).to.include({ status: 'pending', postedBy: 'dead-letter' });
    expect(copy.source).to.deep.equal({ queue: q.name, id, status: 'failed', attempts: 1, error: { reason: 'smtp timeout' } });
    expect((await view(server, q)).deadLetters).to.equal(1);
    expect((await bulk(server, HOST, dead, 'redrive', {})).json).to.deep.equal({ moved: 1, more: false });
    expect((await letters.fetchRaw(copyId)).status).to.equal(404);
    const again = await q.claim({ worker: 'w' });
    expect(again.item).to.deep.equal({ to: 'ann' });
    expect(again.id).to.not.equal(id);
    expect((await view(server, q)).deadLetters).to.equal(0);
  });
});

describe('held claims, Retry-After and the held counter (decisions §8.5, black box; needs the stores\' limits)', function () {
  this.timeout(60_000);
  const server = serverForSuite();

  it('maxActive: a claim held with wait is answered as soon as a lease ends (well under a second), and each held request counts once in svcq_claims_held_total', async () => {
    const q = await newQueue(server, HOST, { maxActive: 1 });
    const [a, b] = [await q.post({ n: 1 }), await q.post({ n: 2 })];
    expect((await q.claim({ worker: 'w' })).id).to.equal(a);
    // A second claim finds nothing while a is leased: no Retry-After for maxActive.
    const empty = await q.claimRaw({ worker: 'w' });
    expect(empty.json).to.deep.equal({ ok: true, empty: true });
    expect(empty.headers['retry-after']).to.equal(undefined);
    const held = q.claim({ worker: 'w', wait: 20 });
    // The held claim has made its first look (and been counted) once the counter moves.
    const series = `svcq_claims_held_total{host="${HOST}",queue="${q.name}",reason="maxActive"}`;
    for (let n = 0; (await metric(server, series)) !== 2; n++) {
      if (n > 200) throw new Error('the held claim was not counted');
      await new Promise((r) => setTimeout(r, 10));
    }
    const ended = Date.now();
    await q.submit(a, 'result', { ok: true });
    const answer = await held;
    expect(Date.now() - ended).to.be.below(800);
    expect(answer.id).to.equal(b);
    expect(await metric(server, series)).to.equal(2);
    const shown = await view(server, q);
    expect(shown.held).to.deep.equal({ paused: 0, maxActive: 2, groupMaxActive: 0, rateLimit: 0 });
    expect(shown.active).to.equal(1);
    expect(await metric(server, `svcq_queue_active{host="${HOST}",queue="${q.name}"}`)).to.equal(1);
  });

  it('rateLimit: an empty claim carries Retry-After (whole seconds until the next lease may happen), and a claim held with wait is answered when the window moves on, not before', async () => {
    const q = await newQueue(server, HOST, { rateLimit: { max: 1, perSeconds: 3 } });
    await q.post({ n: 1 });
    await q.post({ n: 2 });
    const leased = Date.now();
    expect((await q.claim({ worker: 'w' })).item).to.deep.equal({ n: 1 });
    const empty = await q.claimRaw({ worker: 'w' });
    expect(empty.json).to.deep.equal({ ok: true, empty: true });
    expect(Number(empty.headers['retry-after'])).to.be.within(1, 3);
    const many = await q.claimRaw({ worker: 'w', max: 5 });
    expect(many.json).to.deep.equal({ ok: true, items: [] });
    expect(Number(many.headers['retry-after'])).to.be.within(1, 3);
    const answer = await q.claim({ worker: 'w', wait: 10 });
    const took = Date.now() - leased;
    expect(answer.item).to.deep.equal({ n: 2 });
    expect(took).to.be.within(2900, 4000);
    expect(await metric(server, `svcq_claims_held_total{host="${HOST}",queue="${q.name}",reason="rateLimit"}`)).to.equal(3);
  });

  it('a paused queue counts its claims as held by "paused", with no Retry-After', async () => {
    const q = await newQueue(server, HOST);
    await q.post({ n: 1 });
    expect((await request(server.url, `/api/v2/queues/${HOST}/${q.name}/pause`, { method: 'POST', token: server.masterToken })).status).to.equal(200);
    const empty = await q.claimRaw({ worker: 'w' });
    expect(empty.headers['retry-after']).to.equal(undefined);
    expect(((await view(server, q)).held as Json).paused).to.equal(1);
  });
});

describe('the queue view shows the limits (decisions §5.1, §8.5, §8.6, black box)', function () {
  this.timeout(60_000);
  const server = serverForSuite();

  it('GET /api/v2/queues/<host>/<name> and the list carry limits, active, held, groupsWaiting and deadLetters', async () => {
    const dead = uniqueName('dead');
    await defineQueue(server, HOST, dead, { access: PUBLIC_ACCESS });
    const letters = new QueueApi(server, HOST, dead);
    await letters.post({ n: 1 });
    await letters.post({ n: 2 });
    const q = await newQueue(server, HOST, { maxActive: 5, groupMaxActive: 2, rateLimit: { max: 100, perSeconds: 60 }, fairness: 'groups', deadLetter: dead });
    await q.post({ n: 1 });
    await q.claim({ worker: 'w' });
    const shown = await view(server, q);
    expect(shown.limits).to.deep.equal({ maxActive: 5, groupMaxActive: 2, rateLimit: { max: 100, perSeconds: 60 }, fairness: 'groups', deadLetter: dead });
    expect(shown.active).to.equal(1);
    expect(shown.held).to.deep.equal({ paused: 0, maxActive: 0, groupMaxActive: 0, rateLimit: 0 });
    expect(shown.deadLetters).to.equal(2);
    const plain = await view(server, letters);
    expect(plain.limits).to.deep.equal({ maxActive: null, groupMaxActive: null, rateLimit: null, fairness: 'fifo', deadLetter: null });
    expect(plain.deadLetters).to.equal(null);
    expect(plain.groupsWaiting).to.equal(null);
    const list = ((await request(server.url, '/api/v2/queues', { token: server.masterToken })).json as { queues: Json[] }).queues;
    const entry = list.find((e) => e.name === q.name)!;
    expect(entry).to.include({ active: 1, deadLetters: 2 });
    expect(entry.limits).to.deep.equal(shown.limits);
    // A dead-letter queue that is not defined: null, not 0.
    const orphan = await newQueue(server, HOST, { deadLetter: uniqueName('nowhere') });
    expect((await view(server, orphan)).deadLetters).to.equal(null);
  });

  it('groupsWaiting counts the groups with a claimable item of a queue with fairness "groups" (needs the stores\' fairness)', async () => {
    const q = await newQueue(server, HOST, { fairness: 'groups' });
    for (const group of ['a', 'a', 'b', 'c']) {
      const reply = await q.raw('POST', `/${q.name}?group=${group}`, '{}');
      expect(reply.status, reply.text).to.equal(200);
    }
    expect((await view(server, q)).groupsWaiting).to.equal(3);
  });
});
