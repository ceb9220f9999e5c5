import { expect } from 'chai';
import { request, stableHeaders, type Reply } from '../support/http.js';
import type { QueueDetail, QueueEntry } from '../support/operators.js';
import { cleanupTemp, serverForSuite, startServer, type TestServer } from '../support/server.js';
import { defineQueue, deleteDef, newQueue, PUBLIC_ACCESS, QueueApi, type Json } from './queue-api.js';

/**
 * Pausing a queue (decisions §8.4), as a black box: `POST /api/v2/queues/<host>/<name>/pause` and
 * `…/resume` with the master token, what a paused queue still does and what it does not, held
 * claims, a restart, and the views that show it.
 */

const HOST = 'pause.example.com';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** POST …/pause or …/resume; `token` null sends none. */
function setPaused(server: TestServer, host: string, name: string, action: 'pause' | 'resume', token: string | null = server.masterToken): Promise<Reply> {
  return request(server.url, `/api/v2/queues/${host}/${name}/${action}`, { method: 'POST', token: token ?? undefined });
}

async function pause(server: TestServer, q: QueueApi, action: 'pause' | 'resume' = 'pause'): Promise<void> {
  const reply = await setPaused(server, q.host, q.name, action);
  expect(reply.status, reply.text).to.equal(200);
  expect(reply.json).to.deep.equal({ paused: action === 'pause' });
}

/** What the list, the one-queue view and the metrics say of the queue's pause. */
async function shown(server: TestServer, q: QueueApi): Promise<{ list: boolean; one: boolean; metric: string }> {
  const token = { token: server.masterToken };
  const list = ((await request(server.url, '/api/v2/queues', token)).json as { queues: QueueEntry[] }).queues.find((e) => e.host === q.host && e.name === q.name)!;
  const one = (await request(server.url, `/api/v2/queues/${q.host}/${q.name}`, token)).json as QueueDetail;
  const metrics = (await request(server.url, '/api/v2/metrics', token)).text;
  const metric = metrics.split('\n').find((l) => l.startsWith(`svcq_queue_paused{host="${q.host}",queue="${q.name}"}`)) ?? '';
  return { list: list.paused, one: one.paused, metric: metric.split(' ').pop()! };
}

describe('pausing a queue (decisions §8.4, black box)', function () {
  this.timeout(60_000);
  const server = serverForSuite();

  it('POST …/pause answers { paused: true } and …/resume { paused: false }, each as often as asked; the list, the one-queue view and svcq_queue_paused say which', async () => {
    const q = await newQueue(server, HOST);
    expect(await shown(server, q)).to.deep.equal({ list: false, one: false, metric: '0' });
    await pause(server, q);
    await pause(server, q);
    expect(await shown(server, q)).to.deep.equal({ list: true, one: true, metric: '1' });
    await pause(server, q, 'resume');
    await pause(server, q, 'resume');
    expect(await shown(server, q)).to.deep.equal({ list: false, one: false, metric: '0' });
  });

  it('a paused queue leases nothing: a claim, one of up to max and one with criteria find nothing, while a claim\'s hand-ins are applied; posts, fetches and submissions go on', async () => {
    const q = await newQueue(server, HOST, { maxAttempts: 3 });
    const [a, b, c] = [await q.post({ n: 1 }), await q.post({ n: 2 }), await q.post({ n: 3 })];
    expect((await q.claim({ worker: 'w', max: 2 })).items).to.have.length(2);
    await pause(server, q);
    const late = await q.post({ late: true });
    expect(await q.claim({ worker: 'w' })).to.deep.equal({ ok: true, empty: true });
    expect(await q.claim({ worker: 'w', max: 10 })).to.deep.equal({ ok: true, items: [] });
    expect(await q.claim({ worker: 'w', criteria: { late: true } })).to.deep.equal({ ok: true, empty: true });
    // A worker hands in its last job with its next claim: the job is taken, no new one is leased.
    expect(await q.claim({ worker: 'w', done: [{ id: a, result: { ok: 1 } }] })).to.deep.equal({ ok: true, empty: true, done: [{ id: a, ok: true, accepted: true, status: 'finished' }] });
    expect(await q.submit(b, 'progress', { pct: 50 })).to.include({ accepted: true, status: 'processing' });
    expect(await q.submit(b, 'error', { why: 'x' })).to.include({ accepted: true, status: 'pending' });
    expect(await q.submit(c, 'cancel')).to.include({ accepted: true, status: 'cancelled' });
    expect(await q.fetch(late)).to.include({ status: 'pending', attempts: 0 });
    expect(await q.fetch(b)).to.include({ status: 'pending', attempts: 1 });
    await pause(server, q, 'resume');
    // Leasing again, oldest first: b kept its place.
    expect(((await q.claim({ worker: 'w', max: 10 })).items as Json[]).map((i) => i.id)).to.deep.equal([b, late]);
  });

  it('a claim held with wait goes on waiting past items posted while paused, and is answered as soon as the queue is resumed; one of up to max too', async () => {
    const q = await newQueue(server, HOST);
    await pause(server, q);
    let answered = false;
    const one = q.claim({ worker: 'patient', wait: 20 }).finally(() => (answered = true));
    const many = q.claim({ worker: 'patient', wait: 20, max: 5 });
    await sleep(100);
    // Six: a claim of up to five whose look comes first after the resume leaves one for the other.
    const ids: string[] = [];
    for (let n = 1; n <= 6; n++) ids.push(await q.post({ n }));
    // Time for a claim woken by the posts to have been answered, had the pause not held it.
    await sleep(300);
    expect(answered, 'answered while paused').to.equal(false);
    const resumed = Date.now();
    await pause(server, q, 'resume');
    const [first, rest] = await Promise.all([one, many]);
    expect(Date.now() - resumed).to.be.below(5000);
    const got = [first.id as string, ...(rest.items as Json[]).map((i) => i.id as string)];
    expect(got.sort()).to.deep.equal([...ids].sort());
  });

  it('the pause belongs to the host/name pair: a queue deleted and put back is still paused, and its items with it', async () => {
    const q = await newQueue(server, HOST);
    const id = await q.post({ kept: true });
    await pause(server, q);
    await deleteDef(server, `${HOST}/svc-queues/${q.name}.json`);
    expect((await setPaused(server, HOST, q.name, 'resume')).json).to.deep.equal({ error: 'no such queue' });
    await defineQueue(server, HOST, q.name, { access: PUBLIC_ACCESS });
    expect(await shown(server, q)).to.deep.equal({ list: true, one: true, metric: '1' });
    expect(await q.claim({ worker: 'w' })).to.deep.equal({ ok: true, empty: true });
    await pause(server, q, 'resume');
    expect((await q.claim({ worker: 'w' })).id).to.equal(id);
  });

  it('an undefined host/name pair is 404 { error: "no such queue" } with the master token; anything else denied is the wall, byte for byte', async () => {
    const q = await newQueue(server, HOST);
    const wall = await request(server.url, '/api/v2/no-such-route', { token: server.masterToken });
    const same = (reply: Reply, what: string): void => {
      expect(reply.status, what).to.equal(404);
      expect(stableHeaders(reply), what).to.deep.equal(stableHeaders(wall));
      expect(reply.text, what).to.equal(wall.text);
    };
    for (const action of ['pause', 'resume'] as const) {
      for (const [host, name] of [[HOST, 'no-such-queue'], ['nowhere.example.com', q.name]]) {
        const reply = await setPaused(server, host!, name!, action);
        expect(reply.status).to.equal(404);
        expect(reply.text).to.equal('{"error":"no such queue"}');
      }
      same(await setPaused(server, HOST, q.name, action, null), `${action} without a token`);
      same(await setPaused(server, HOST, q.name, action, 'not-the-master-token'), `${action} with a wrong token`);
      same(await setPaused(server, HOST, 'no-such-queue', action, null), `${action} of no queue without a token`);
      same(await request(server.url, `/api/v2/queues/${HOST}/${q.name}/${action}`, { method: 'POST', token: 'some-user-token', host: HOST }), `${action} with a user token`);
      same(await request(server.url, `/api/v2/queues/${HOST}/${q.name}/${action}`, { token: server.masterToken }), `GET ${action}`);
      same(await request(server.url, `/api/v2/queues/${HOST}/${q.name}/${action}/`, { method: 'POST', token: server.masterToken }), `${action} with a trailing slash`);
      // The queue domain has no such route: a pause is for the master token alone.
      same(await request(server.url, `/${q.name}/${action}`, { method: 'POST', host: HOST }), `POST /${q.name}/${action} on the queue domain`);
    }
    same(await request(server.url, `/api/v2/queues/${HOST}/${q.name}`, { method: 'POST', token: server.masterToken }), 'POST one queue');
    expect((await shown(server, q)).one).to.equal(false);
  });
});

describe('a pause across restarts (decisions §6, §8.4, black box)', function () {
  this.timeout(60_000);
  let server: TestServer | undefined;
  let root: string | undefined;
  afterEach(async () => {
    await server?.stop();
    if (root) cleanupTemp(root);
    server = undefined;
    root = undefined;
  });

  it('a paused queue is still paused after a stop and after a kill -9, and a resume made after that survives them too', async () => {
    let node = (server = await startServer());
    root = node.root;
    let q = await newQueue(node, HOST);
    const id = await q.post({ n: 1 });
    await pause(node, q);
    const restart = async (how: 'stop' | 'kill9'): Promise<void> => {
      if (how === 'stop') await node.stop();
      else await node.kill9();
      node = server = await startServer({ root });
      q = new QueueApi(node, q.host, q.name);
    };
    for (const how of ['stop', 'kill9'] as const) {
      await restart(how);
      expect(await shown(node, q), how).to.deep.equal({ list: true, one: true, metric: '1' });
      expect(await q.claim({ worker: 'w' }), how).to.deep.equal({ ok: true, empty: true });
    }
    await pause(node, q, 'resume');
    await restart('kill9');
    expect(await shown(node, q)).to.deep.equal({ list: false, one: false, metric: '0' });
    expect((await q.claim({ worker: 'w' })).id).to.equal(id);
  });
});
