import { expect } from 'chai';
import { existsSync, mkdirSync, readdirSync, renameSync, utimesSync, writeFileSync } from 'node:fs';
import type http from 'node:http';
import path from 'node:path';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { agentRequest, defineQueue, keepAliveAgent, pool, PUBLIC_ACCESS, QueueApi, type Json } from '../http/queue-api.js';

const HOST = 'crash.example.com';
const IN_FLIGHT = 32;

interface Expected {
  status: string;
  attempts: number;
  result?: unknown;
  error?: unknown;
  progress?: unknown;
}

describe('the embedded store after kill -9 (decisions §6)', function () {
  this.timeout(60_000);
  let root: string;
  let server: TestServer | undefined;
  let agent: http.Agent;

  before(() => {
    root = tempDir();
    agent = keepAliveAgent(IN_FLIGHT);
  });
  after(async () => {
    agent.destroy();
    await server?.stop();
    cleanupTemp(root);
  });

  it('brings back every acknowledged item with its status, attempts, records and lease deadline after kill -9 (decisions §6)', async () => {
    server = await startServer({ root });
    const call = (method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> =>
      agentRequest(agent, server!.url, path, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });

    await defineQueue(server, HOST, 'main', { access: PUBLIC_ACCESS, leaseSeconds: 600, maxAttempts: 3 });
    await defineQueue(server, HOST, 'short', { access: PUBLIC_ACCESS, leaseSeconds: 8, maxAttempts: 3 });
    await defineQueue(server, HOST, 'late', { access: PUBLIC_ACCESS });

    const expected = new Map<string, Expected>();

    // 500 concurrent posts.
    const posted = await pool(500, IN_FLIGHT, async (i) => {
      const reply = await call('POST', '/main', { i, pad: 'x'.repeat(i % 50) });
      expect(reply.status, JSON.stringify(reply.json)).to.equal(200);
      return reply.json.id as string;
    });
    expect(new Set(posted).size).to.equal(500);
    for (const id of posted) expected.set(id, { status: 'pending', attempts: 0 });

    // 150 concurrent claims.
    const claims = await pool(150, IN_FLIGHT, async (k) => {
      const reply = await call('POST', '/main/claim', { worker: `w${k}` });
      expect(reply.status).to.equal(200);
      expect(reply.json.id, JSON.stringify(reply.json)).to.be.a('string');
      return reply.json;
    });
    const claimedIds = claims.map((c) => c.id as string);
    expect(new Set(claimedIds).size).to.equal(150);
    for (const c of claims) expected.set(c.id as string, { status: 'claimed', attempts: 1 });

    // Of those: 50 results, 20 errors (re-queued, attempts left), 10 progress records.
    const finished = claimedIds.slice(0, 50);
    const errored = claimedIds.slice(50, 70);
    const progressed = claimedIds.slice(70, 80);
    await pool(finished.length + errored.length + progressed.length, IN_FLIGHT, async (k) => {
      if (k < 50) {
        const id = finished[k]!;
        const reply = await call('POST', `/main/items/${id}/result`, { output: `done ${k}` });
        expect(reply.json).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
        expected.set(id, { status: 'finished', attempts: 1, result: { output: `done ${k}` } });
      } else if (k < 70) {
        const id = errored[k - 50]!;
        const reply = await call('POST', `/main/items/${id}/error`, { code: k });
        expect(reply.json).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
        expected.set(id, { status: 'pending', attempts: 1, error: { code: k } });
      } else {
        const id = progressed[k - 70]!;
        const reply = await call('POST', `/main/items/${id}/progress`, { percent: k });
        expect(reply.json).to.deep.equal({ ok: true, accepted: true, status: 'processing' });
        expected.set(id, { status: 'processing', attempts: 1, progress: { percent: k } });
      }
    });

    // A last wave of posts still in flight when the process dies: whatever was acknowledged must survive.
    const lateAcked: string[] = [];
    let killed = false;
    const lateWave = pool(400, IN_FLIGHT, async (i) => {
      if (killed) return;
      try {
        const reply = await call('POST', '/late', { i });
        if (reply.status === 200) lateAcked.push(reply.json.id as string);
      } catch {
        // The connection died with the server: not acknowledged, so nothing is promised.
      }
    });
    const deadline = Date.now() + 10_000;
    while (lateAcked.length < 40 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    // A lease short enough to watch it end after the restart, granted just before the crash.
    const shortId = (await call('POST', '/short', { n: 1 })).json.id as string;
    const shortClaim = await call('POST', '/short/claim', { worker: 'short-lived' });
    expect(shortClaim.json.id).to.equal(shortId);
    const shortUntil = (shortClaim.json.lease as Json).until as number;
    await server.kill9();
    killed = true;
    await lateWave;
    expect(lateAcked.length).to.be.at.least(40);

    agent.destroy();
    agent = keepAliveAgent(IN_FLIGHT);
    // Down for a second: a lease restarted at boot would then end well after the one that was granted.
    await new Promise((r) => setTimeout(r, 1000));
    server = await startServer({ root });

    // Every acknowledged item is back as it was.
    const records = await pool(posted.length, IN_FLIGHT, async (i) => (await call('GET', `/main/items/${posted[i]}`)).json);
    for (const record of records) {
      const want = expected.get(record.id as string)!;
      expect(record.ok, JSON.stringify(record)).to.equal(true);
      expect({ status: record.status, attempts: record.attempts }, record.id as string).to.deep.equal({ status: want.status, attempts: want.attempts });
      expect(record.result, record.id as string).to.deep.equal(want.result ?? null);
      expect(record.error, record.id as string).to.deep.equal(want.error ?? null);
      expect(record.progress, record.id as string).to.deep.equal(want.progress ?? null);
      if (want.status === 'finished') expect(record.finishedAt).to.be.a('number');
      else expect(record.finishedAt).to.equal(null);
    }
    const late = await pool(lateAcked.length, IN_FLIGHT, async (i) => call('GET', `/late/items/${lateAcked[i]}`));
    for (const [i, reply] of late.entries()) {
      expect(reply.status, lateAcked[i]).to.equal(200);
      expect(reply.json, lateAcked[i]).to.include({ status: 'pending', attempts: 0 });
    }

    // Leases survived: a claimed item is not handed out again.
    const next = await call('POST', '/main/claim', { worker: 'after' });
    const nextId = next.json.id as string;
    expect(expected.get(nextId)?.status, `claimed ${nextId} after the restart`).to.equal('pending');

    // The short lease keeps its deadline: it ends at the same `until`, not a full lease after the
    // restart. The queue view (decisions §5.1) shows the lease as the restart found it, or none
    // when a slow restart let it end already.
    const shortQueue = new QueueApi(server, HOST, 'short');
    const view = (await request(server.url, `/api/v2/queues/${HOST}/short`, { token: server.masterToken })).json as { leases: Array<{ id: string; until: number }> };
    if (view.leases.length > 0) expect(view.leases, 'the lease as the restart found it').to.deep.equal([{ ...view.leases[0], id: shortId, until: shortUntil }]);
    else expect(Date.now(), 'no lease shown before it was due to end').to.be.at.least(shortUntil);
    await shortQueue.until(shortId, (r) => r.status === 'pending', 20_000);
    // Not before its deadline (the view above showed that deadline kept, not restarted at boot).
    expect(Date.now()).to.be.at.least(shortUntil - 50);
    expect(await shortQueue.fetch(shortId)).to.include({ attempts: 1 });
  });

  it('keeps idempotency keys, timeouts and a lease that ended while the server was down across kill -9 (decisions §3.2, §3.5, §6)', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    try {
      await defineQueue(s, HOST, 'keys', { access: PUBLIC_ACCESS, timeoutSeconds: 3 });
      await defineQueue(s, HOST, 'blink', { access: PUBLIC_ACCESS, leaseSeconds: 1, maxAttempts: 1 });
      let keys = new QueueApi(s, HOST, 'keys');
      let blink = new QueueApi(s, HOST, 'blink');
      const keyed = await keys.post({ n: 1 }, { headers: { 'idempotency-key': 'once-only' } });
      const postedAt = (await keys.fetch(keyed)).postedAt as number;
      const leased = await blink.post({ n: 1 });
      const until = ((await blink.claim()).lease as Json).until as number;
      await s.kill9();

      // Down past the 1 s lease: at start-up it has expired on its last attempt.
      await new Promise((r) => setTimeout(r, Math.max(0, until + 100 - Date.now())));
      s = await startServer({ root: own });
      // A timeout that fell due while the server was down is applied as it comes back.
      const up = Date.now();
      keys = new QueueApi(s, HOST, 'keys');
      blink = new QueueApi(s, HOST, 'blink');
      const again = await keys.postRaw({ n: 2 }, { headers: { 'idempotency-key': 'once-only' } });
      // The key names the item posted before the crash (pending still, or timed out already when
      // the restart took long: its timeout is checked below).
      expect(again.json).to.deep.include({ ok: true, id: keyed });
      expect(['pending', 'timedout']).to.include((again.json as Json).status);
      expect(await blink.until(leased, (r) => r.status === 'failed', 2000)).to.deep.include({ attempts: 1, error: { reason: 'lease expired' } });

      const timedout = await keys.until(keyed, (r) => r.status === 'timedout', 5000);
      expect(timedout.finishedAt).to.be.within(postedAt + 3000 - 50, Math.max(postedAt + 3000, up) + 800);
      expect(await keys.claim()).to.deep.equal({ ok: true, empty: true });
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });
});

describe('dead letters after kill -9 (decisions §6, §8.6)', function () {
  this.timeout(60_000);

  it('a failure and its dead-letter copy are both there or both absent after kill -9 amid errors in flight; every acknowledged failure has its copy', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    const agent = keepAliveAgent(IN_FLIGHT);
    try {
      const call = (method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> =>
        agentRequest(agent, s.url, path, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });
      await defineQueue(s, HOST, 'graveyard', { access: PUBLIC_ACCESS });
      await defineQueue(s, HOST, 'fragile', { access: PUBLIC_ACCESS, maxAttempts: 1, leaseSeconds: 600, deadLetter: 'graveyard' });
      const ids = await pool(300, IN_FLIGHT, async (i) => (await call('POST', '/fragile', { i })).json.id as string);
      await pool(300, IN_FLIGHT, async () => expect((await call('POST', '/fragile/claim', { worker: 'w' })).json.id).to.be.a('string'));
      const acked = new Set<string>();
      let killed = false;
      const wave = pool(ids.length, IN_FLIGHT, async (i) => {
        if (killed) return;
        try {
          const reply = await call('POST', `/fragile/items/${ids[i]}/error`, { i });
          if (reply.status === 200) acked.add(ids[i]!);
        } catch {
          // The connection died with the server: not acknowledged.
        }
      });
      const deadline = Date.now() + 10_000;
      while (acked.size < 60 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
      await s.kill9();
      killed = true;
      await wave;
      agent.destroy();
      s = await startServer({ root: own });
      const again = keepAliveAgent(IN_FLIGHT);
      const get = async (path: string): Promise<Json> => (await agentRequest(again, s.url, path, { method: 'GET', host: HOST })).json;
      try {
        let failed = 0;
        const records = await pool(ids.length, IN_FLIGHT, async (i) => get(`/fragile/items/${ids[i]}`));
        for (const r of records) {
          if (acked.has(r.id as string)) expect(r.status, r.id as string).to.equal('failed');
          if (r.status === 'failed') {
            failed++;
            expect(r.deadLetterId, r.id as string).to.be.a('string');
            const copy = await get(`/graveyard/items/${r.deadLetterId}`);
            expect(copy.source, r.id as string).to.deep.include({ queue: 'fragile', id: r.id, status: 'failed' });
          } else {
            expect(r.status).to.equal('claimed');
            expect(r).to.not.have.property('deadLetterId');
          }
        }
        expect(failed).to.be.at.least(acked.size);
        // No copy without its failure: the dead-letter queue holds exactly one item per failed original.
        let copies = 0;
        for (;;) {
          const reply = (await agentRequest(again, s.url, '/graveyard/claim', { method: 'POST', host: HOST, body: JSON.stringify({ worker: 'count', max: 100 }) })).json;
          const items = reply.items as Json[];
          if (items.length === 0) break;
          copies += items.length;
        }
        expect(copies).to.equal(failed);
      } finally {
        again.destroy();
      }
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });
});

describe('files a crash left staged under the root (decisions §6)', function () {
  this.timeout(30_000);
  let root: string;
  let server: TestServer | undefined;

  before(() => (root = tempDir()));
  after(async () => {
    await server?.stop();
    cleanupTemp(root);
  });

  it('are removed in the background at start, however recent (a restart follows a crash at once); files of other names stay', async () => {
    const payloads = path.join(root, '_svcq', 'payloads', HOST, 'main');
    const definitions = path.join(root, HOST, 'svc-queues');
    mkdirSync(payloads, { recursive: true });
    mkdirSync(definitions, { recursive: true });
    const hourAgo = new Date(Date.now() - 3_600_000);
    const plant = (file: string, old: boolean): string => {
      writeFileSync(file, '{"half":');
      if (old) utimesSync(file, hourAgo, hourAgo);
      return file;
    };
    const leftovers = [
      plant(path.join(payloads, '.0123456789abcdef.item.a1b2c3d4e5f6.tmp'), true),
      plant(path.join(definitions, '.main.json.00ff00ff00ff.tmp'), true),
      // Staged a moment before the start: by the process that crashed, not by a request of this one.
      plant(path.join(payloads, '.fedcba9876543210.result.abcdefabcdef.tmp'), false),
    ];
    const kept = [
      // Not a name a staged file gets.
      plant(path.join(payloads, '.notes.tmp'), true),
      plant(path.join(definitions, 'main.json.tmp'), true),
      // The server's own home is not the definitions' place.
      plant(path.join(root, '_svcq', '.x.json.a1b2c3d4e5f6.tmp'), true),
    ];
    server = await startServer({ root });
    const deadline = Date.now() + 10_000;
    while (leftovers.some((f) => existsSync(f)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(leftovers.filter((f) => existsSync(f)), 'left over').to.deep.equal([]);
    expect(kept.filter((f) => !existsSync(f)), 'removed though not left by a crash').to.deep.equal([]);
    await new Promise((r) => setTimeout(r, 200));
    expect(server.output()).to.match(/removed 3 half-written files a crash left under /);
  });

  it('puts in place an archived payload a crash left staged after its change was made durable, so that the archive agrees with the items (decisions §5, §6)', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    try {
      await defineQueue(s, HOST, 'arch', { access: PUBLIC_ACCESS, leaseSeconds: 600, 'svc-queue-archivePayloads': true });
      let q = new QueueApi(s, HOST, 'arch');
      const done = await q.post({ n: 'done', text: 'é😀' });
      const waiting = await q.post({ n: 'waiting' });
      expect((await q.claim()).id).to.equal(done);
      await q.submit(done, 'result', { output: 'kept' });
      const payloadOf = async (server: TestServer, id: string, kind: string): Promise<string> => (await q.raw('GET', `/api/v2/tasks/payload?host=${HOST}&queue=arch&id=${id}&kind=${kind}`, undefined, { token: server.masterToken, host: new URL(server.url).host })).text;
      const want = { doneItem: await payloadOf(s, done, 'item'), doneResult: await payloadOf(s, done, 'result'), waitingItem: await payloadOf(s, waiting, 'item') };
      expect(want.doneItem).to.equal('{"n":"done","text":"é😀"}');
      expect(want.doneResult).to.equal('{"output":"kept"}');
      await s.kill9();

      // What kill -9 leaves between a change's journal write and its payload's rename: the change
      // is durable, its payload still under the temporary name (a batch of 1,000 renames one by one).
      const dir = path.join(own, '_svcq', 'payloads', HOST, 'arch');
      renameSync(path.join(dir, `${done}.item`), path.join(dir, `.${done}.item.a1b2c3d4e5f6.tmp`));
      renameSync(path.join(dir, `${done}.result`), path.join(dir, `.${done}.result.a1b2c3d4e5f7.tmp`));
      renameSync(path.join(dir, `${waiting}.item`), path.join(dir, `.${waiting}.item.a1b2c3d4e5f8.tmp`));
      // Staged for changes that never became durable: other bytes than the item holds.
      writeFileSync(path.join(dir, `.${waiting}.result.a1b2c3d4e5f9.tmp`), '{"never":"written"}');
      writeFileSync(path.join(dir, `.${done}.error.a1b2c3d4e5fa.tmp`), '{"never":"written"}');

      s = await startServer({ root: own });
      q = new QueueApi(s, HOST, 'arch');
      const deadline = Date.now() + 10_000;
      while (readdirSync(dir).some((f) => f.endsWith('.tmp')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(dir).filter((f) => f.endsWith('.tmp')), 'left staged').to.deep.equal([]);
      expect(await payloadOf(s, done, 'item')).to.equal(want.doneItem);
      expect(await payloadOf(s, done, 'result')).to.equal(want.doneResult);
      expect(await payloadOf(s, waiting, 'item')).to.equal(want.waitingItem);
      expect(await payloadOf(s, waiting, 'result'), 'a payload of a change that never was').to.equal('');
      expect(await payloadOf(s, done, 'error'), 'a payload of a change that never was').to.equal('');
      await new Promise((r) => setTimeout(r, 200));
      expect(s.output()).to.match(/archived 3 payloads a crash left staged/);
      expect(s.output()).to.match(/removed 2 half-written files/);
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });

  it('puts in place an archived payload a crash left staged after its change was made durable, also when retention purges the item at start, before the payload is looked at (decisions §5: payloads survive retention; §6)', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    try {
      await defineQueue(s, HOST, 'brief', { access: PUBLIC_ACCESS, leaseSeconds: 600, retainSeconds: 1, 'svc-queue-archivePayloads': true });
      let q = new QueueApi(s, HOST, 'brief');
      const done = await q.post({ n: 'done' });
      expect((await q.claim()).id).to.equal(done);
      await q.submit(done, 'result', { output: 'kept' });
      const payloadOf = async (server: TestServer, id: string, kind: string): Promise<string> => (await q.raw('GET', `/api/v2/tasks/payload?host=${HOST}&queue=brief&id=${id}&kind=${kind}`, undefined, { token: server.masterToken, host: new URL(server.url).host })).text;
      const want = { item: await payloadOf(s, done, 'item'), result: await payloadOf(s, done, 'result') };
      expect(want).to.deep.equal({ item: '{"n":"done"}', result: '{"output":"kept"}' });
      await s.kill9();

      // kill -9 between the result's journal write and its payload's rename.
      const dir = path.join(own, '_svcq', 'payloads', HOST, 'brief');
      renameSync(path.join(dir, `${done}.result`), path.join(dir, `.${done}.result.a1b2c3d4e5f6.tmp`));
      // The item's second of retention ends while the server is down: the start purges it.
      await new Promise((r) => setTimeout(r, 1500));

      s = await startServer({ root: own });
      q = new QueueApi(s, HOST, 'brief');
      const deadline = Date.now() + 10_000;
      while (readdirSync(dir).some((f) => f.endsWith('.tmp')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(dir).filter((f) => f.endsWith('.tmp')), 'left staged').to.deep.equal([]);
      expect((await q.fetchRaw(done)).status, 'purged by retention').to.equal(404);
      expect(await payloadOf(s, done, 'item')).to.equal(want.item);
      expect(await payloadOf(s, done, 'result'), 'the acknowledged result, archived').to.equal(want.result);
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });
});
