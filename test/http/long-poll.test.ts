import http from 'node:http';
import { expect } from 'chai';
import { cleanupTemp, startServer, serverForSuite } from '../support/server.js';
import type { Reply } from '../support/http.js';
import { agentRequest, defineQueue, defineUser, deleteDef, keepAliveAgent, newQueue, PUBLIC_ACCESS, uniqueName, type Json } from './queue-api.js';

const HOST = 'poll.example.com';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function expectWall(reply: Reply, what: string): void {
  expect(reply.status, what).to.equal(404);
  expect(reply.text, what).to.equal('{"error":"not found"}');
}

/** Runs `work` and reports how long it took. */
async function timed<T>(work: Promise<T>, since = Date.now()): Promise<{ value: T; ms: number }> {
  const value = await work;
  return { value, ms: Date.now() - since };
}

describe('long polls over HTTP', function () {
  this.timeout(20_000);
  const server = serverForSuite();

  it('holds a claim with wait and answers it as soon as an item is posted (decisions §3.3)', async () => {
    const q = await newQueue(server, HOST);
    const start = Date.now();
    const waiting = timed(q.claim({ worker: 'patient', wait: 5 }), start);
    await sleep(300);
    const id = await q.post({ n: 1 });
    const { value: claim, ms } = await waiting;
    expect(claim).to.deep.include({ ok: true, id, item: { n: 1 }, attempts: 1 });
    expect((claim.lease as Json).worker).to.equal('patient');
    expect(ms).to.be.within(250, 1500);
    expect(await q.fetch(id)).to.include({ status: 'claimed' });
  });

  it('answers an unanswerable claim with wait: 1 with empty after about a second (decisions §3.3)', async () => {
    const q = await newQueue(server, HOST);
    const { value, ms } = await timed(q.claim({ wait: 1 }));
    expect(value).to.deep.equal({ ok: true, empty: true });
    expect(ms).to.be.within(900, 2500);
  });

  it('wakes a waiting claim only for an item that matches its criteria (decisions §3.3)', async () => {
    const q = await newQueue(server, HOST);
    const start = Date.now();
    const waiting = timed(q.claim({ wait: 5, criteria: { kind: 'b' } }), start);
    await sleep(200);
    const a = await q.post({ kind: 'a' });
    await sleep(200);
    const b = await q.post({ kind: 'b' });
    const { value: claim, ms } = await waiting;
    expect(claim.id).to.equal(b);
    expect(ms).to.be.within(350, 1500);
    expect(await q.fetch(a)).to.include({ status: 'pending', attempts: 0 });
  });

  it('gives one posted item to exactly one of two waiting claims; the other ends empty (interface §4.2 rule 2)', async () => {
    const q = await newQueue(server, HOST);
    const start = Date.now();
    const first = timed(q.claim({ wait: 1 }), start);
    const second = timed(q.claim({ wait: 1 }), start);
    await sleep(200);
    const id = await q.post({ n: 1 });
    const results = await Promise.all([first, second]);
    const winners = results.filter((r) => r.value.id === id);
    const losers = results.filter((r) => r.value.empty === true);
    expect(winners).to.have.length(1);
    expect(losers).to.have.length(1);
    expect(winners[0]!.ms).to.be.below(900);
    expect(losers[0]!.ms).to.be.at.least(900);
    expect(await q.fetch(id)).to.include({ attempts: 1 });
  });

  it('wakes a waiting claim when an expired lease re-queues an item (decisions §3.2, §3.3)', async () => {
    const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 3 });
    const id = await q.post({ n: 1 });
    const first = await q.claim({ worker: 'lost' });
    const until = (first.lease as Json).until as number;
    const { value: claim } = await timed(q.claim({ worker: 'next', wait: 5 }));
    expect(claim).to.include({ id, attempts: 2 });
    expect(Date.now()).to.be.within(until - 50, until + 1500);
  });

  it('wakes a waiting claim when a re-queued item’s retry delay passes (decisions §2.2, §3.3)', async () => {
    const q = await newQueue(server, HOST, { retryDelaySeconds: 1, maxAttempts: 3 });
    const id = await q.post({ n: 1 });
    await q.claim();
    const start = Date.now();
    await q.submit(id, 'error', { code: 1 });
    const { value: claim, ms } = await timed(q.claim({ wait: 5 }), start);
    expect(claim).to.include({ id, attempts: 2 });
    expect(ms).to.be.within(900, 2500);
  });

  it('does not hand an item to a waiting claim whose caller hung up (decisions §3.3)', async () => {
    const q = await newQueue(server, HOST);
    const url = new URL(server.url);
    const body = JSON.stringify({ wait: 10 });
    const gone = new Promise<void>((resolve) => {
      const req = http.request({ hostname: url.hostname, port: url.port, path: `/${q.name}/claim`, method: 'POST', agent: false, headers: { host: HOST, 'content-type': 'application/json', 'content-length': String(body.length) } });
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      req.end(body);
      setTimeout(() => req.destroy(), 200);
    });
    await gone;
    // The server learns of the hang-up asynchronously; a round trip on another connection gives it the chance.
    await q.claim();
    const id = await q.post({ n: 1 });
    expect(await q.fetch(id)).to.include({ status: 'pending', attempts: 0 });
    expect(await q.claim()).to.include({ id, attempts: 1 });
  });

  it('does not hand an item to a claim whose caller hung up right after sending it, before its first look came back (decisions §3.3)', async () => {
    // The hang-up can reach the server while the claim's first look (no waiting yet) is still at
    // the store; the claim must not go on to wait for items on behalf of nobody.
    const q = await newQueue(server, HOST);
    const url = new URL(server.url);
    const body = JSON.stringify({ wait: 10 });
    const hangUp = (): Promise<void> =>
      new Promise<void>((resolve) => {
        const req = http.request({ hostname: url.hostname, port: url.port, path: `/${q.name}/claim`, method: 'POST', agent: false, headers: { host: HOST, 'content-type': 'application/json', 'content-length': String(body.length) } });
        req.on('error', () => resolve());
        req.on('close', () => resolve());
        req.end(body, () => req.destroy());
      });
    await Promise.all(Array.from({ length: 8 }, hangUp));
    await q.claim();
    const ids: string[] = [];
    for (let n = 0; n < 8; n++) ids.push(await q.post({ n }));
    await sleep(100);
    for (const id of ids) expect(await q.fetch(id)).to.include({ status: 'pending', attempts: 0 });
  });

  it('holds GET …/items/<id>?wait and answers as soon as the item is terminal (decisions §3.6)', async () => {
    const q = await newQueue(server, HOST);
    const id = await q.post({ n: 1 });
    await q.claim();
    const start = Date.now();
    const waiting = timed(q.fetch(id, '?wait=5'), start);
    await sleep(300);
    await q.submit(id, 'result', { output: 'ready' });
    const { value: record, ms } = await waiting;
    expect(record).to.deep.include({ status: 'finished', result: { output: 'ready' } });
    expect(ms).to.be.within(250, 1500);
  });

  it('wakes a waiting fetch when the item becomes terminal by cancel, by timeout or by its last lease ending (decisions §3.1, §3.6)', async () => {
    const cancelQ = await newQueue(server, HOST);
    const timeoutQ = await newQueue(server, HOST, { timeoutSeconds: 1 });
    const leaseQ = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 1 });
    const cancelId = await cancelQ.post({ n: 1 });
    const timeoutId = await timeoutQ.post({ n: 1 });
    const leaseId = await leaseQ.post({ n: 1 });
    const until = ((await leaseQ.claim()).lease as Json).until as number;
    const timeoutAt = ((await timeoutQ.fetch(timeoutId)).postedAt as number) + 1000;

    const start = Date.now();
    const waits = [timed(cancelQ.fetch(cancelId, '?wait=5'), start), timed(timeoutQ.fetch(timeoutId, '?wait=5'), start), timed(leaseQ.fetch(leaseId, '?wait=5'), start)];
    await sleep(200);
    await cancelQ.submit(cancelId, 'cancel');
    const [cancelled, timedout, failed] = await Promise.all(waits);
    expect(cancelled.value.status).to.equal('cancelled');
    expect(cancelled.ms).to.be.below(900);
    expect(timedout.value.status).to.equal('timedout');
    expect(start + timedout.ms).to.be.within(timeoutAt - 50, timeoutAt + 1500);
    expect(failed.value).to.deep.include({ status: 'failed', error: { reason: 'lease expired' } });
    expect(start + failed.ms).to.be.within(until - 50, until + 1500);
  });

  it('answers a fetch with wait at once for a terminal item, and after the wait for one that stays open (decisions §3.6)', async () => {
    const q = await newQueue(server, HOST);
    const done = await q.post({ n: 1 });
    await q.submit(done, 'cancel');
    const quick = await timed(q.fetch(done, '?wait=5'));
    expect(quick.value).to.include({ status: 'cancelled' });
    expect(quick.ms).to.be.below(500);

    const open = await q.post({ n: 2 });
    const slow = await timed(q.fetch(open, '?wait=1'));
    expect(slow.value).to.include({ status: 'pending' });
    expect(slow.ms).to.be.within(900, 2500);
  });

  it('a wait of N seconds ends after N seconds, not later: a claim and a fetch with wait 3 answer after 3 s (decisions §3.3, §3.6)', async () => {
    const q = await newQueue(server, HOST);
    const open = await q.post({ n: 1 });
    await q.claim();
    const start = Date.now();
    // Nothing to claim and nothing that ends the item: both are held their whole wait, and no longer.
    const [claim, fetched] = await Promise.all([timed(q.claim({ wait: 3 }), start), timed(q.fetch(open, '?wait=3'), start)]);
    expect(claim.value).to.deep.equal({ ok: true, empty: true });
    expect(claim.ms, 'claim').to.be.within(2900, 4500);
    expect(fetched.value).to.include({ status: 'claimed' });
    expect(fetched.ms, 'fetch').to.be.within(2900, 4500);
  });

  it('a claim\'s wait counts from the request\'s arrival: the time its body took to come in is part of the wait (decisions §3.3)', async () => {
    const q = await newQueue(server, HOST);
    const body = JSON.stringify({ wait: 2 });
    const url = new URL(server.url);
    const start = Date.now();
    // The head goes out at once, the body 1.5 s later: the answer is due 2 s after the head, not 2 s after the body.
    const answered = new Promise<Json>((resolve, reject) => {
      const req = http.request({ hostname: url.hostname, port: url.port, path: `/${q.name}/claim`, method: 'POST', agent: false, headers: { host: HOST, 'content-type': 'application/json', 'content-length': String(body.length) } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json));
      });
      req.on('error', reject);
      req.flushHeaders();
      setTimeout(() => req.end(body), 1500);
    });
    const { value, ms } = await timed(answered, start);
    expect(value).to.deep.equal({ ok: true, empty: true });
    expect(ms).to.be.within(1900, 2900);
  });

  it('rejects a fetch wait that is not an integer from 0 to 30 with 400 (decisions §3.6)', async () => {
    const q = await newQueue(server, HOST);
    const id = await q.post({ n: 1 });
    for (const wait of ['31', '-1', '1.5', 'soon', '100']) {
      const reply = await q.fetchRaw(id, `?wait=${wait}`);
      expect(reply.status, wait).to.equal(400);
      expect((reply.json as Json).ok, wait).to.equal(false);
    }
  });

  it('a claim held over a definition PUT leases for the leaseSeconds put, not those of when it came (decisions §2.2, §2.4, §3.3)', async () => {
    const q = await newQueue(server, HOST, { leaseSeconds: 300 });
    const waiting = q.claim({ wait: 5 });
    await sleep(300);
    await defineQueue(server, HOST, q.name, { leaseSeconds: 5, access: PUBLIC_ACCESS });
    const id = await q.post({ n: 1 });
    const claim = await waiting;
    expect(claim).to.include({ id, attempts: 1 });
    // 5 s, not 300: the upper bound leaves room for a store whose clock is the database's (PostgreSQL), a few ms off this one.
    expect(((claim.lease as Json).until as number) - Date.now()).to.be.within(3000, 5500);
  });

  it('a claim or fetch held when its queue is deleted gets the wall at once and claims nothing later; one that handed in first reports its hand-ins (decisions §2.4, §3.8)', async () => {
    const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 3 });
    const leased = await q.post({ n: 1 });
    await q.claim();
    const handed = await q.post({ n: 2 });
    await q.claim();
    const start = Date.now();
    const claim = timed(q.claimRaw({ wait: 5 }), start);
    const fetched = timed(q.fetchRaw(leased, '?wait=5'), start);
    const handIn = timed(q.claimRaw({ wait: 5, done: [{ id: handed, result: { output: 'done' } }] }), start);
    await sleep(300);
    await deleteDef(server, `${HOST}/svc-queues/${q.name}.json`);
    for (const [what, held] of [['claim', await claim], ['fetch', await fetched]] as const) {
      expectWall(held.value, what);
      expect(held.ms, what).to.be.below(1500);
    }
    const { value: reply, ms } = await handIn;
    expect(reply.status).to.equal(200);
    expect(reply.json).to.deep.equal({ ok: true, empty: true, done: [{ id: handed, ok: true, accepted: true, status: 'finished' }] });
    expect(ms).to.be.below(1500);
    // The lease ends while the queue is deleted: the claim that was held is not handed the item.
    await sleep(1500);
    await defineQueue(server, HOST, q.name, { leaseSeconds: 1, maxAttempts: 3, access: PUBLIC_ACCESS });
    expect(await q.fetch(leased)).to.include({ status: 'pending', attempts: 1 });
    expect(await q.fetch(handed)).to.include({ status: 'finished', attempts: 1 });
  });

  it('a claim or fetch held when its caller loses the access gets the wall at once: its user deleted, or its operation no longer public (decisions §2.4, §5)', async () => {
    const worker = uniqueName('worker');
    const token = `${worker}-token`;
    await defineUser(server, HOST, worker, token);
    const access = { post: 'public', fetch: 'public', work: [worker] };
    const q = await newQueue(server, HOST, { access });
    const id = await q.post({ n: 1 });
    const start = Date.now();
    const claim = timed(q.claimRaw({ wait: 5, criteria: { n: 2 } }, { token }), start);
    const fetched = timed(q.fetchRaw(id, '?wait=5'), start);
    await sleep(300);
    await deleteDef(server, `${HOST}/svc-users/${worker}.json`);
    const lost = await claim;
    expectWall(lost.value, 'claim of a deleted user');
    expect(lost.ms).to.be.below(1500);
    await defineQueue(server, HOST, q.name, { access: { ...access, fetch: [worker] } });
    const hidden = await fetched;
    expectWall(hidden.value, 'public fetch no longer public');
    expect(hidden.ms).to.be.below(1500);
    // The claim that was held is gone: an item it would have matched stays pending.
    await defineQueue(server, HOST, q.name, { access: PUBLIC_ACCESS });
    const later = await q.post({ n: 2 });
    await sleep(100);
    expect(await q.fetch(later)).to.include({ status: 'pending', attempts: 0 });
  });

  it('answers waiting claims and fetches promptly on SIGTERM, then exits 0 (decisions §1.1)', async () => {
    const own = await startServer();
    try {
      const q = await newQueue(own, HOST);
      const id = await q.post({ n: 1 });
      await q.claim();
      const claimRaw = q.claimRaw({ wait: 30 });
      const fetchRaw = q.fetchRaw(id, '?wait=30');
      // Nothing observable says a request is being held, so give both a moment to arrive.
      await sleep(300);
      const start = Date.now();
      const code = await own.stop('SIGTERM');
      const [claim, fetched] = await Promise.all([claimRaw, fetchRaw]);
      expect(Date.now() - start).to.be.below(3000);
      expect(code).to.equal(0);
      // The server answers a held claim with an ordinary empty answer, not a dropped connection.
      expect(claim.status).to.equal(200);
      expect(claim.json).to.deep.equal({ ok: true, empty: true });
      expect(fetched.status).to.equal(200);
      expect(fetched.json).to.include({ id, status: 'claimed' });
    } finally {
      await own.stop();
      cleanupTemp(own.root);
    }
  });

  it('long polls on one keep-alive connection leave no listeners behind (no MaxListenersExceededWarning)', async () => {
    const q = await newQueue(server, HOST);
    const id = await q.post({ n: 1 });
    await q.submit(id, 'result', { done: true });
    for (let i = 0; i < 15; i++) await q.post({ i });
    const agent = keepAliveAgent(1);
    try {
      for (let i = 0; i < 15; i++) {
        const fetched = await agentRequest(agent, server.url, `/${q.name}/items/${id}?wait=5`, { host: HOST });
        expect(fetched.json.status).to.equal('finished');
        const claimed = await agentRequest(agent, server.url, `/${q.name}/claim`, { method: 'POST', host: HOST, body: '{"wait":1}' });
        expect(claimed.json.id).to.be.a('string');
      }
    } finally {
      agent.destroy();
    }
    expect(server.output()).to.not.include('MaxListenersExceededWarning');
  });
});
