import { expect } from 'chai';
import { cleanupTemp, startServer, serverForSuite } from '../support/server.js';
import { request } from '../support/http.js';
import { agentRequest, defineQueue, defineUser, keepAliveAgent, newQueue, pool, PUBLIC_ACCESS, type Json } from './queue-api.js';

const HOST = 'jobs.example.com';
const WALL = '{"error":"not found"}';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('queue endpoints over HTTP', function () {
  this.timeout(20_000);
  const server = serverForSuite();

  describe('lifecycle and routing', () => {
    it('takes an item through post → claim → progress → result, routed by Host (interface §3, §4.1–§4.2; decisions §3.1)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 30 });
      const before = Date.now();
      const posted = await q.postRaw({ n: 1, text: 'hello' });
      expect(posted.status).to.equal(200);
      const id = (posted.json as Json).id as string;
      expect(posted.json).to.deep.equal({ ok: true, id, status: 'pending' });
      expect(id).to.match(/^[0-9a-f]{16}$/);

      const pending = await q.fetch(id);
      expect(pending).to.include({ ok: true, id, status: 'pending', postedBy: 'public', finishedAt: null, attempts: 0, progress: null, result: null, error: null });
      expect(pending.postedAt).to.be.within(before - 1000, Date.now() + 1000);
      expect(pending.updatedAt).to.be.a('number');

      const claimedAt = Date.now();
      const claim = await q.claim({ worker: 'w1' });
      expect(claim).to.deep.include({ ok: true, id, item: { n: 1, text: 'hello' }, attempts: 1 });
      const lease = claim.lease as { worker: string; until: number };
      expect(lease.worker).to.equal('w1');
      expect(lease.until).to.be.within(claimedAt + 30_000 - 1000, Date.now() + 30_000 + 1000);
      expect(await q.fetch(id)).to.include({ status: 'claimed', attempts: 1 });

      expect(await q.submit(id, 'progress', { percent: 50 })).to.deep.equal({ ok: true, accepted: true, status: 'processing' });
      expect(await q.fetch(id)).to.deep.include({ status: 'processing', progress: { percent: 50 }, finishedAt: null });

      expect(await q.submit(id, 'result', { output: 'done' })).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
      const finished = await q.fetch(id);
      expect(finished).to.deep.include({ status: 'finished', attempts: 1, progress: { percent: 50 }, result: { output: 'done' }, error: null });
      expect(finished.finishedAt).to.be.a('number').and.to.be.at.least(pending.postedAt as number);
      expect(finished.updatedAt).to.be.at.least(pending.updatedAt as number);
    });

    it('hands the worker the posted item unchanged (interface §4.2)', async () => {
      const q = await newQueue(server, HOST);
      const item = { text: 'héllo ☃ \u2028 "quoted"', big: 9007199254740991, neg: -0.5, nested: { a: [1, { b: null }], e: {} }, empty: [] };
      const id = await q.post(item);
      expect(await q.claim()).to.deep.include({ id, item });
      const spaced = await q.post('{ "a" : 1 ,\n "b" : [ true ] }');
      expect(await q.claim()).to.deep.include({ id: spaced, item: { a: 1, b: [true] } });
    });

    it('does not find an item of one queue through another queue of the same host (decisions §3.5, §3.7)', async () => {
      const q1 = await newQueue(server, HOST);
      const q2 = await newQueue(server, HOST);
      const id = await q1.post({ n: 1 });
      for (const reply of [await q2.fetchRaw(id), await q2.submitRaw(id, 'result', { x: 1 }), await q2.submitRaw(id, 'cancel')]) {
        expect(reply.status).to.equal(404);
        expect(reply.json).to.deep.equal({ ok: false, error: 'no such item' });
      }
      expect(await q1.fetch(id)).to.include({ status: 'pending' });
    });

    it('rejects a progress, result or error record that is not a JSON object with 400 and changes nothing (interface §4.2, decisions §3.4)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({ n: 1 });
      await q.claim();
      const before = await q.fetch(id);
      for (const kind of ['progress', 'result', 'error'] as const) {
        for (const body of ['[1]', '"done"', '7', '{oops']) {
          const reply = await q.raw('POST', `/${q.name}/items/${id}/${kind}`, body);
          expect(reply.status, `${kind} ${body}`).to.equal(400);
          expect((reply.json as Json).ok, `${kind} ${body}`).to.equal(false);
        }
      }
      expect(await q.fetch(id)).to.deep.equal(before);
    });

    it('purges a terminal item retainSeconds after its first terminal fetch with retainFrom "fetched" (decisions §2.2)', async () => {
      const q = await newQueue(server, HOST, { retainFrom: 'fetched', retainSeconds: 0 });
      const id = await q.post({ n: 1 });
      await q.claim();
      expect((await q.fetch(id)).status).to.equal('claimed');
      await q.submit(id, 'result', { output: 'once' });
      expect(await q.fetch(id)).to.deep.include({ status: 'finished', result: { output: 'once' } });
      let gone = await q.fetchRaw(id);
      for (let i = 0; i < 40 && gone.status === 200; i++) {
        await sleep(25);
        gone = await q.fetchRaw(id);
      }
      expect(gone.status).to.equal(404);
      expect(gone.json).to.deep.equal({ ok: false, error: 'no such item' });
    });

    it('routes a Host header with a port and in uppercase to the same queue (decisions §2.1)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({ n: 1 });
      const plain = await q.fetchRaw(id);
      for (const host of [`${HOST}:8080`, 'JOBS.Example.COM', 'Jobs.Example.Com:443']) {
        const reply = await q.fetchRaw(id, '', { host });
        expect(reply.status, host).to.equal(200);
        expect(reply.json, host).to.deep.equal(plain.json);
      }
    });

    it('answers the same queue name on another Host with the wall (interface §5.3, decisions §4)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({ n: 1 });
      for (const host of ['other.example.com', 'example.com', `x.${HOST}`]) {
        const fetched = await q.fetchRaw(id, '', { host });
        expect(fetched.status, host).to.equal(404);
        expect(fetched.text, host).to.equal(WALL);
        const posted = await q.postRaw({ n: 2 }, { host });
        expect(posted.text, host).to.equal(WALL);
        const claimed = await q.claimRaw({}, { host });
        expect(claimed.text, host).to.equal(WALL);
      }
      expect((await q.claim()).id).to.equal(id);
    });
  });

  describe('FIFO', () => {
    it('claims the oldest pending item first, one per claim (interface §4.2 rules 1–2)', async () => {
      const q = await newQueue(server, HOST);
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push(await q.post({ i }));
      for (let i = 0; i < 5; i++) {
        const claim = await q.claim();
        expect(claim.id).to.equal(ids[i]);
        expect(claim.item).to.deep.equal({ i });
      }
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('never hands one item to two of many concurrent claims (interface §4.2 rule 2)', async () => {
      const q = await newQueue(server, HOST);
      const agent = keepAliveAgent(16);
      try {
        const ids = await pool(20, 16, (i) => q.post({ i }));
        const claims = await pool(40, 16, async () => (await agentRequest(agent, server.url, `/${q.name}/claim`, { method: 'POST', host: HOST, body: '{}' })).json);
        const got = claims.filter((c) => c.id !== undefined).map((c) => c.id as string);
        expect(got).to.have.length(20);
        expect([...got].sort()).to.deep.equal([...ids].sort());
        expect(claims.filter((c) => c.empty === true)).to.have.length(20);
      } finally {
        agent.destroy();
      }
    });

    it('claims a re-queued item, which keeps its postedAt, before younger items (decisions §3.2)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 3 });
      const old = await q.post({ age: 'old' });
      const postedAt = (await q.fetch(old)).postedAt;
      expect((await q.claim()).id).to.equal(old);
      const young1 = await q.post({ age: 'young1' });
      const young2 = await q.post({ age: 'young2' });
      expect(await q.submit(old, 'error', { why: 'retry me' })).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
      expect(await q.fetch(old)).to.include({ status: 'pending', postedAt, attempts: 1 });
      const again = await q.claim();
      expect(again).to.include({ id: old, attempts: 2 });
      expect((await q.claim()).id).to.equal(young1);
      expect((await q.claim()).id).to.equal(young2);
    });
  });

  describe('criteria', () => {
    const A = { n: 5, s: 'm', b: true, arr: [1, 2], k: 'x', o: { x: 2 } };
    const B = { n: 10, s: 'z', b: false, arr: [1, 2, 3], k: 'y', o: { x: 1 }, z: null };
    const matching: [string, Record<string, unknown>, 'A' | 'B' | 'none'][] = [
      ['bare number', { n: 10 }, 'B'],
      ['bare string', { s: 'z' }, 'B'],
      ['bare boolean', { b: false }, 'B'],
      ['bare value of another JSON type (strict)', { n: '10' }, 'none'],
      ['eq', { n: { eq: 10 } }, 'B'],
      ['eq on a string', { k: { eq: 'y' } }, 'B'],
      ['ne on a number', { n: { ne: 5 } }, 'B'],
      ['ne on a string', { s: { ne: 'm' } }, 'B'],
      ['lt on numbers', { n: { lt: 10 } }, 'A'],
      ['lt on numbers, none smaller', { n: { lt: 5 } }, 'none'],
      ['lte on numbers', { n: { lte: 5 } }, 'A'],
      ['gt on numbers', { n: { gt: 5 } }, 'B'],
      ['gte on numbers', { n: { gte: 10 } }, 'B'],
      ['gte on numbers, none as large', { n: { gte: 11 } }, 'none'],
      ['lt on strings', { s: { lt: 'z' } }, 'A'],
      ['lte on strings', { s: { lte: 'm' } }, 'A'],
      ['gt on strings', { s: { gt: 'm' } }, 'B'],
      ['gte on strings', { s: { gte: 'n' } }, 'B'],
      ['in', { k: { in: ['q', 'y'] } }, 'B'],
      ['in with strict membership', { n: { in: ['5', 10] } }, 'B'],
      ['bare array by deep equality', { arr: [1, 2, 3] }, 'B'],
      ['bare array by deep equality (the other)', { arr: [1, 2] }, 'A'],
      ['bare array in another order', { arr: [2, 1] }, 'none'],
      ['several criteria all pass', { n: { gte: 5 }, s: 'z' }, 'B'],
      ['several criteria, one fails', { n: 5, s: 'z' }, 'none'],
      ['no criteria: the oldest', {}, 'A'],
      ['bare null', { z: null }, 'B'],
      ['eq null', { z: { eq: null } }, 'B'],
      ['ne with another JSON type (present and not equal)', { n: { ne: '5' } }, 'A'],
      ['eq on an object value by deep equality', { o: { eq: { x: 1 } } }, 'B'],
      ['in with an array member', { arr: { in: [[1, 2, 3]] } }, 'B'],
    ];
    for (const [what, criteria, expected] of matching) {
      it(`matches ${what}: ${JSON.stringify(criteria)} → ${expected} (interface §4.3, decisions §3.3)`, async () => {
        const q = await newQueue(server, HOST);
        const ids = { A: await q.post(A), B: await q.post(B) };
        const claim = await q.claim({ criteria });
        if (expected === 'none') {
          expect(claim).to.deep.equal({ ok: true, empty: true });
        } else {
          expect(claim.id).to.equal(ids[expected]);
          expect(claim.item).to.deep.equal(expected === 'A' ? A : B);
        }
        const other = expected === 'A' ? 'B' : 'A';
        expect((await q.fetch(ids[other])).status).to.equal('pending');
        if (expected === 'none') expect((await q.fetch(ids.A)).status).to.equal('pending');
      });
    }

    it('fails closed: a missing field, an unknown operator, several keys, mixed types or a non-array `in` match nothing and leave items pending (interface §4.3, decisions §3.3)', async () => {
      const q = await newQueue(server, HOST);
      const ids = [await q.post(A), await q.post(B)];
      const closed: Record<string, unknown>[] = [
        { missing: 1 },
        { missing: { ne: 1 } },
        { missing: { lt: 100 } },
        { n: { like: 5 } },
        { n: { $gt: 1 } },
        { n: { gt: 1, lt: 100 } },
        { n: {} },
        { n: { lt: 'z' } },
        { s: { gt: 1 } },
        { b: { gte: false } },
        { n: { in: 5 } },
        { k: { in: 'xy' } },
        { n: 5, missing: { ne: 0 } },
        { o: { x: 1 } },
        { toString: { ne: 1 } },
        { constructor: { ne: 1 } },
      ];
      for (const criteria of closed) {
        expect(await q.claim({ criteria }), JSON.stringify(criteria)).to.deep.equal({ ok: true, empty: true });
      }
      for (const id of ids) expect(await q.fetch(id)).to.include({ status: 'pending', attempts: 0 });
    });

    it('rejects a claim body that is not an object, criteria that are not an object, and a bad wait with 400 { ok: false, errors } (decisions §3.3)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post(A);
      const bad: string[] = [
        '[1,2]',
        '"criteria"',
        '42',
        'null',
        '{not json',
        JSON.stringify({ criteria: 5 }),
        JSON.stringify({ criteria: 'n=5' }),
        JSON.stringify({ criteria: [{ n: 5 }] }),
        JSON.stringify({ criteria: null }),
        JSON.stringify({ wait: 1.5 }),
        JSON.stringify({ wait: '5' }),
        JSON.stringify({ wait: -1 }),
        JSON.stringify({ wait: 31 }),
      ];
      for (const body of bad) {
        const reply = await q.claimRaw(body);
        expect(reply.status, body).to.equal(400);
        const json = reply.json as Json;
        expect(json.ok, body).to.equal(false);
        expect(json.errors, body).to.be.an('array').with.length.greaterThan(0);
        for (const e of json.errors as Json[]) {
          expect(e.path, body).to.be.a('string');
          expect(e.message, body).to.be.a('string').with.length.greaterThan(0);
        }
      }
      expect(await q.fetch(id)).to.include({ status: 'pending', attempts: 0 });
    });
  });

  describe('leases, attempts and errors', () => {
    it('re-queues an item whose lease ends, then fails it after maxAttempts with error { reason: "lease expired" } (decisions §3.2, §7)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 2 });
      const id = await q.post({ n: 1 });
      const first = await q.claim({ worker: 'w1' });
      expect(first).to.include({ id, attempts: 1 });
      const requeued = await q.until(id, (r) => r.status === 'pending');
      expect(requeued).to.include({ attempts: 1, finishedAt: null });
      expect(requeued.updatedAt).to.be.at.least(((first.lease as Json).until as number) - 50);
      const second = await q.claim({ worker: 'w2' });
      expect(second).to.include({ id, attempts: 2 });
      const failed = await q.until(id, (r) => r.status === 'failed');
      expect(failed).to.deep.include({ attempts: 2, error: { reason: 'lease expired' }, result: null });
      expect(failed.finishedAt).to.be.a('number').and.at.least(((second.lease as Json).until as number) - 50);
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('names the worker exactly as sent in the lease and the operators\' view, characters outside the BMP included; a name no store could keep as sent (U+0000, a lone surrogate) is a 400 naming /worker, and nothing is leased (interface §4.2)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 60 });
      const id = await q.post({ n: 1 });
      for (const worker of ['a\u0000b', '\ud800', 'x\udfff']) {
        const refused = await q.claimRaw(JSON.stringify({ worker }));
        expect(refused.status, JSON.stringify(worker)).to.equal(400);
        expect(refused.json).to.deep.include({ ok: false });
        expect(((refused.json as Json).errors as Json[])[0]).to.include({ path: '/worker' });
      }
      expect(await q.fetch(id)).to.include({ status: 'pending', attempts: 0 });
      const claimed = await q.claim({ worker: 'w\u{1F600}é' });
      expect(claimed).to.deep.include({ id, lease: { worker: 'w\u{1F600}é', until: (claimed.lease as Json).until } });
      const view = await request(server.url, `/api/v2/queues/${HOST}/${q.name}`, { token: server.masterToken });
      expect(((view.json as Json).leases as Json[])[0]).to.include({ id, worker: 'w\u{1F600}é' });
    });

    it('leases for the leaseSeconds of the definition as it is at the claim (decisions §2.2, §2.4)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 60 });
      await q.post({ n: 1 });
      await q.post({ n: 2 });
      const before = Date.now();
      const first = (await q.claim()).lease as Json;
      expect(first.until).to.be.within(before + 60_000 - 1000, Date.now() + 60_000 + 1000);
      await defineQueue(server, HOST, q.name, { access: PUBLIC_ACCESS, leaseSeconds: 600 });
      const now = Date.now();
      const second = (await q.claim()).lease as Json;
      expect(second.until).to.be.within(now + 600_000 - 1000, Date.now() + 600_000 + 1000);
    });

    it('keeps a re-queued item unclaimable for retryDelaySeconds (decisions §2.2, §3.2)', async () => {
      const q = await newQueue(server, HOST, { retryDelaySeconds: 1, maxAttempts: 3 });
      const id = await q.post({ n: 1 });
      await q.claim();
      const erroredAt = Date.now();
      expect(await q.submit(id, 'error', { code: 1 })).to.include({ accepted: true, status: 'pending' });
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
      let claim: Json;
      for (;;) {
        claim = await q.claim();
        if (!claim.empty) break;
        expect(Date.now() - erroredAt, 'the delayed item never became claimable').to.be.below(4000);
        await sleep(50);
      }
      expect(claim).to.include({ id, attempts: 2 });
      expect(Date.now() - erroredAt).to.be.at.least(900);
    });

    it('re-queues on an error submission and fails on the last attempt with error = the submitted record (decisions §3.4, §7)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 2 });
      const id = await q.post({ n: 1 });
      await q.claim();
      expect(await q.submit(id, 'error', { code: 1, stderr: 'first' })).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
      expect(await q.fetch(id)).to.deep.include({ status: 'pending', attempts: 1, error: { code: 1, stderr: 'first' }, finishedAt: null });
      expect(await q.claim()).to.include({ id, attempts: 2 });
      expect(await q.submit(id, 'error', { code: 2, stderr: 'second' })).to.deep.equal({ ok: true, accepted: true, status: 'failed' });
      const failed = await q.fetch(id);
      expect(failed).to.deep.include({ status: 'failed', attempts: 2, error: { code: 2, stderr: 'second' } });
      expect(failed.finishedAt).to.be.a('number');
      expect(await q.submit(id, 'result', { late: true })).to.deep.equal({ ok: true, accepted: false, status: 'failed' });
      expect(await q.fetch(id)).to.deep.equal(failed);
    });

    it('accepts a late result from a worker whose lease was re-queued, and refuses the next worker’s (interface §3, decisions §3.2)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 3 });
      const id = await q.post({ n: 1 });
      await q.claim({ worker: 'slow' });
      await q.until(id, (r) => r.status === 'pending');
      expect(await q.claim({ worker: 'fast' })).to.include({ id, attempts: 2 });
      expect(await q.submit(id, 'result', { by: 'slow' })).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
      expect(await q.submit(id, 'result', { by: 'fast' })).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
      expect(await q.fetch(id)).to.deep.include({ status: 'finished', result: { by: 'slow' }, attempts: 2 });
    });

    it('accepts a result for a re-queued item that nobody claimed again (interface §4.2 rule 6)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 3 });
      const id = await q.post({ n: 1 });
      await q.claim({ worker: 'slow' });
      await q.until(id, (r) => r.status === 'pending');
      expect(await q.submit(id, 'result', { by: 'slow' })).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('extends the lease on an accepted progress, so a heartbeating item is not re-queued (decisions §3.2)', async () => {
      const q = await newQueue(server, HOST, { leaseSeconds: 1, maxAttempts: 3 });
      const id = await q.post({ n: 1 });
      const claim = await q.claim();
      const until = (claim.lease as Json).until as number;
      await sleep(700);
      expect(await q.submit(id, 'progress', { percent: 50 })).to.include({ accepted: true });
      const heartbeat = Date.now();
      await sleep(until + 300 - Date.now());
      expect(await q.fetch(id), 'still leased past the first until').to.include({ status: 'processing', attempts: 1 });
      const requeued = await q.until(id, (r) => r.status === 'pending', 3000);
      expect(requeued.updatedAt).to.be.at.least(heartbeat + 1000 - 100);
    });

    it('answers progress, result and error after a result with accepted: false and changes nothing (interface §3, §4.2 rule 5; decisions §7)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({ n: 1 });
      await q.claim();
      await q.submit(id, 'progress', { percent: 10 });
      await q.submit(id, 'result', { output: 'first' });
      const before = await q.fetch(id);
      expect(await q.submit(id, 'progress', { percent: 99 })).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
      expect(await q.submit(id, 'result', { output: 'second' })).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
      expect(await q.submit(id, 'error', { code: 1 })).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
      expect(await q.submit(id, 'cancel')).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
      expect(await q.fetch(id)).to.deep.equal(before);
    });
  });

  describe('timeout and cancel', () => {
    it('times an item out after timeoutSeconds; later submissions get accepted: false, status "timedout" (interface §3; decisions §2.2, §3.1)', async () => {
      const q = await newQueue(server, HOST, { timeoutSeconds: 1, leaseSeconds: 60 });
      const id = await q.post({ n: 1 });
      const postedAt = (await q.fetch(id)).postedAt as number;
      await q.claim();
      await q.submit(id, 'progress', { percent: 5 });
      const timedout = await q.until(id, (r) => r.status === 'timedout');
      expect(timedout.finishedAt).to.be.a('number').and.at.least(postedAt + 1000 - 50);
      expect(timedout).to.deep.include({ progress: { percent: 5 }, result: null });
      for (const kind of ['progress', 'result', 'error'] as const) {
        expect(await q.submit(id, kind, { late: kind }), kind).to.deep.equal({ ok: true, accepted: false, status: 'timedout' });
      }
      expect(await q.submit(id, 'cancel')).to.deep.equal({ ok: true, accepted: false, status: 'timedout' });
      expect(await q.fetch(id)).to.deep.equal(timedout);
    });

    it('a definition PUT that brings the timeout sooner times an item out at the new deadline, with no request to the queue after it (decisions §2.2, §2.4)', async () => {
      const q = await newQueue(server, HOST, { timeoutSeconds: 3600 });
      const id = await q.post({ n: 1 });
      await defineQueue(server, HOST, q.name, { access: PUBLIC_ACCESS, timeoutSeconds: 1 });
      // Only the operators' view is read (it applies nothing itself): the store's own timer must fire.
      const counts = async (): Promise<Json> => ((await request(server.url, `/api/v2/queues/${HOST}/${q.name}`, { token: server.masterToken })).json as { counts: Json }).counts;
      const deadline = Date.now() + 6000;
      while ((await counts()).timedout !== 1 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
      expect(await counts()).to.include({ pending: 0, timedout: 1 });
      expect(await q.fetch(id)).to.include({ status: 'timedout' });
    });

    it('times out a pending item that nobody claimed (decisions §2.2)', async () => {
      const q = await newQueue(server, HOST, { timeoutSeconds: 1 });
      const id = await q.post({ n: 1 });
      expect(await q.until(id, (r) => r.status === 'timedout')).to.include({ attempts: 0 });
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('cancels a claimed item for a caller with post access; later progress/result/error get accepted: false, status "cancelled" (decisions §3.6)', async () => {
      await defineUser(server, HOST, 'producer', 'producer-token-1');
      await defineUser(server, HOST, 'worker', 'worker-token-1');
      const q = await newQueue(server, HOST, { access: { post: ['producer'], fetch: ['producer'], work: ['worker'] } });
      const id = await q.post({ n: 1 }, { token: 'producer-token-1' });
      expect((await q.claim({}, { token: 'worker-token-1' })).id).to.equal(id);

      for (const token of [undefined, 'worker-token-1']) {
        const denied = await q.raw('POST', `/${q.name}/items/${id}/cancel`, undefined, { token });
        expect(denied.status, String(token)).to.equal(404);
        expect(denied.text, String(token)).to.equal(WALL);
      }
      const cancel = await q.submitRaw(id, 'cancel', undefined, { token: 'producer-token-1' });
      expect(cancel.json).to.deep.equal({ ok: true, accepted: true, status: 'cancelled' });
      const fetched = await q.fetchRaw(id, '', { token: 'producer-token-1' });
      const record = fetched.json as Json;
      expect(record).to.include({ status: 'cancelled' });
      expect(record.finishedAt).to.be.a('number');

      for (const kind of ['progress', 'result', 'error'] as const) {
        const late = await q.submitRaw(id, kind, { late: kind }, { token: 'worker-token-1' });
        expect(late.json, kind).to.deep.equal({ ok: true, accepted: false, status: 'cancelled' });
      }
      const again = await q.submitRaw(id, 'cancel', undefined, { token: 'producer-token-1' });
      expect(again.json).to.deep.equal({ ok: true, accepted: false, status: 'cancelled' });
      expect((await q.fetchRaw(id, '', { token: 'producer-token-1' })).json).to.deep.equal(record);
    });

    it('cancels a pending item so that no claim gets it (decisions §3.6)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({ n: 1 });
      expect(await q.submit(id, 'cancel')).to.deep.equal({ ok: true, accepted: true, status: 'cancelled' });
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });
  });

  describe('unknown ids', () => {
    it('answers progress, result, error, cancel and fetch for an unknown or malformed id with 404 { ok: false, error: "no such item" } (decisions §3.7)', async () => {
      const q = await newQueue(server, HOST);
      const known = await q.post({ n: 1 });
      const unknown = known === '0123456789abcdef' ? 'fedcba9876543210' : '0123456789abcdef';
      // Ids past the router's usual limit of 100 characters per path segment too.
      for (const id of [unknown, 'xyz', known.toUpperCase(), `${known}0`, known.slice(1), 'zzzzzzzzzzzzzzzz', 'a'.repeat(101), known.repeat(40)]) {
        const replies = [
          await q.fetchRaw(id),
          await q.submitRaw(id, 'progress', { percent: 1 }),
          await q.submitRaw(id, 'result', { output: 'x' }),
          await q.submitRaw(id, 'error', { code: 1 }),
          await q.submitRaw(id, 'cancel'),
        ];
        for (const [i, reply] of replies.entries()) {
          expect(reply.status, `${id} #${i}`).to.equal(404);
          expect(reply.json, `${id} #${i}`).to.deep.equal({ ok: false, error: 'no such item' });
        }
      }
      expect(await q.fetch(known)).to.include({ status: 'pending' });
    });
  });

  describe('idempotency', () => {
    it('returns the first item for a repeated Idempotency-Key and creates nothing (decisions §3.5)', async () => {
      const q = await newQueue(server, HOST);
      const first = await q.postRaw({ n: 1 }, { headers: { 'idempotency-key': 'order-42' } });
      const second = await q.postRaw({ n: 2 }, { headers: { 'idempotency-key': 'order-42' } });
      expect(first.status).to.equal(200);
      expect(second.json).to.deep.equal(first.json);
      const claim = await q.claim();
      expect(claim).to.deep.include({ id: (first.json as Json).id, item: { n: 1 } });
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('scopes an Idempotency-Key to its queue (decisions §3.5)', async () => {
      const q1 = await newQueue(server, HOST);
      const q2 = await newQueue(server, HOST);
      const a = await q1.post({ n: 1 }, { headers: { 'idempotency-key': 'shared' } });
      const b = await q2.post({ n: 2 }, { headers: { 'idempotency-key': 'shared' } });
      expect(a).to.not.equal(b);
      expect(await q2.claim()).to.deep.include({ id: b, item: { n: 2 } });
    });

    it('creates two items for two different keys (decisions §3.5)', async () => {
      const q = await newQueue(server, HOST);
      const a = await q.post({ n: 1 }, { headers: { 'idempotency-key': 'key-a' } });
      const b = await q.post({ n: 2 }, { headers: { 'idempotency-key': 'key-b' } });
      expect(a).to.not.equal(b);
      expect((await q.claim()).id).to.equal(a);
      expect((await q.claim()).id).to.equal(b);
    });

    it('rejects an Idempotency-Key of 201 characters with 400 and accepts one of 200 (decisions §3.5)', async () => {
      const q = await newQueue(server, HOST);
      const bad = await q.postRaw({ n: 1 }, { headers: { 'idempotency-key': 'k'.repeat(201) } });
      expect(bad.status).to.equal(400);
      expect((bad.json as Json).ok).to.equal(false);
      expect((bad.json as Json).errors).to.be.an('array').with.length.greaterThan(0);
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
      await q.post({ n: 2 }, { headers: { 'idempotency-key': 'k'.repeat(200) } });
    });
  });

  describe('posting', () => {
    it('rejects a body that is not one JSON object with 400 { ok: false, errors: [{ path, message }] } (interface §7, decisions §3.5)', async () => {
      const q = await newQueue(server, HOST);
      for (const body of ['[1,2]', '"text"', '42', 'null', 'true', '{broken', '']) {
        const reply = await q.postRaw(body);
        expect(reply.status, body).to.equal(400);
        const json = reply.json as Json;
        expect(json.ok, body).to.equal(false);
        expect(json.errors, body).to.be.an('array').with.length.greaterThan(0);
        for (const e of json.errors as Json[]) {
          expect(Object.keys(e).sort(), body).to.deep.equal(['message', 'path']);
          expect(e.path, body).to.be.a('string');
          expect(e.message, body).to.be.a('string').with.length.greaterThan(0);
        }
      }
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('rejects an item that violates the queue schema with 400 and errors naming the field path (decisions §2.2, §3.5)', async () => {
      const q = await newQueue(server, HOST, {
        schema: { type: 'object', properties: { n: { type: 'integer' }, name: { type: 'string', maxLength: 3 } }, required: ['n'] },
      });
      const wrongType = await q.postRaw({ n: 'five' });
      expect(wrongType.status).to.equal(400);
      expect((wrongType.json as Json).ok).to.equal(false);
      expect(((wrongType.json as Json).errors as Json[]).map((e) => e.path)).to.include('/n');
      const missing = await q.postRaw({ name: 'abc' });
      expect(missing.status).to.equal(400);
      expect(((missing.json as Json).errors as Json[]).map((e) => e.path)).to.include('/n');
      const tooLong = await q.postRaw({ n: 1, name: 'abcd' });
      expect(((tooLong.json as Json).errors as Json[]).map((e) => e.path)).to.include('/name');
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
      await q.post({ n: 1, name: 'abc' });

      const closed = await newQueue(server, HOST, { schema: { type: 'object', properties: { n: { type: 'integer' } }, additionalProperties: false } });
      const extra = await closed.postRaw({ n: 1, 'a/b~': 2 });
      expect(extra.status).to.equal(400);
      expect((extra.json as Json).errors).to.deep.equal([{ path: '/a~1b~0', message: 'is not allowed: the schema allows no other properties here' }]);
    });

    it('records postedBy as the user name, or "public" without a token (decisions §4)', async () => {
      await defineUser(server, HOST, 'poster', 'poster-token-1');
      const q = await newQueue(server, HOST, {}, undefined);
      const byUser = await q.post({ n: 1 }, { token: 'poster-token-1' });
      const anonymous = await q.post({ n: 2 });
      expect((await q.fetch(byUser)).postedBy).to.equal('poster');
      expect((await q.fetch(anonymous)).postedBy).to.equal('public');
    });

    it('rejects a body over --max-body with 413 { ok: false, errors } (decisions §3.5)', async () => {
      const small = await startServer({ args: ['--max-body', '2048'] });
      try {
        const q = await newQueue(small, HOST);
        const big = await q.postRaw({ text: 'x'.repeat(3000) });
        expect(big.status).to.equal(413);
        expect((big.json as Json).ok).to.equal(false);
        expect((big.json as Json).errors).to.be.an('array').with.length.greaterThan(0);
        expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
        const id = await q.post({ text: 'x'.repeat(1900) });
        expect((await q.claim()).id).to.equal(id);
        // The limit itself is allowed: {"text":"…"} of exactly 2,048 bytes.
        const exact = JSON.stringify({ text: 'x'.repeat(2048 - 11) });
        expect(Buffer.byteLength(exact)).to.equal(2048);
        expect((await q.postRaw(exact)).status).to.equal(200);
        expect((await q.postRaw(JSON.stringify({ text: 'x'.repeat(2048 - 10) }))).status).to.equal(413);
        // In a batch, an item past --max-body is refused alone, as a single post of it would be (decisions §3.8).
        const batch = await q.raw('POST', `/${q.name}/batch`, `[{"n":1},${JSON.stringify({ text: 'x'.repeat(2048 - 10) })},{"n":3}]`);
        expect(batch.status, batch.text).to.equal(200);
        expect((batch.json as { items: Array<{ ok: boolean; errors?: Array<{ message: string }> }> }).items.map((i) => i.ok)).to.deep.equal([true, false, true]);
      } finally {
        await small.stop();
        cleanupTemp(small.root);
      }
    });
  });
});
