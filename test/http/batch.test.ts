import net from 'node:net';
import { expect } from 'chai';
import { cleanupTemp, serverForSuite, startServer } from '../support/server.js';
import { newQueue, QueueApi, type Json } from './queue-api.js';

/**
 * Batches and hand-ins (decisions §3.8) against a real server process: batch posts, claims with
 * `max`, and results and errors handed in with the next claim.
 */

const HOST = 'batch.example.com';

interface Entry {
  ok: boolean;
  id?: string;
  status?: string;
  errors?: Array<{ path: string; message: string }>;
}

function batch(q: QueueApi, items: unknown, headers?: Record<string, string>) {
  return q.raw('POST', `/${q.name}/batch`, typeof items === 'string' ? items : JSON.stringify(items), { headers });
}

async function batchOk(q: QueueApi, items: unknown[], headers?: Record<string, string>): Promise<Entry[]> {
  const reply = await batch(q, items, headers);
  expect(reply.status, reply.text).to.equal(200);
  const body = reply.json as { ok: boolean; items: Entry[] };
  expect(body.ok).to.equal(true);
  return body.items;
}

describe('batches and hand-ins over HTTP (decisions §3.8)', function () {
  this.timeout(30_000);
  const server = serverForSuite();

  describe('POST /<queue>/batch', () => {
    it('creates every item, answers one entry per item in order, and items are claimed in that order (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const items = await batchOk(q, [{ n: 0 }, { n: 1 }, { n: 2 }]);
      expect(items).to.have.length(3);
      for (const e of items) expect(e).to.include({ ok: true, status: 'pending' });
      for (let n = 0; n < 3; n++) expect(await q.claim()).to.deep.include({ id: items[n]!.id, item: { n } });
    });

    it('keeps each item exactly as sent, whitespace and all (decisions §3.8, interface §4.2)', async () => {
      const q = await newQueue(server, HOST, { 'svc-queue-archivePayloads': true });
      const text = '[ {"a" : 1, "s": "x,]}[{\\"y"} ,\n{ "b":[1, {"c": ","}] } ]';
      const items = await batchOk(q, JSON.parse(text) as unknown[]);
      const again = await batch(q, text);
      const ids = (again.json as { items: Entry[] }).items.map((e) => e.id!);
      expect(items).to.have.length(2);
      const reply = await q.raw('GET', `/api/v2/tasks/payload?host=${HOST}&queue=${q.name}&id=${ids[1]}&kind=item`, undefined, { token: server.masterToken, host: new URL(server.url).host });
      expect(reply.text).to.equal('{ "b":[1, {"c": ","}] }');
    });

    it('an invalid item does not stop the others: it gets its errors, the rest are created (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST, { schema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } } });
      const items = await batchOk(q, [{ n: 1 }, { n: 'two' }, 3, { n: 4 }]);
      expect(items[0]).to.include({ ok: true, status: 'pending' });
      expect(items[1]!.ok).to.equal(false);
      expect(items[1]!.errors![0]!.path).to.equal('/n');
      expect(items[2]).to.deep.equal({ ok: false, errors: [{ path: '', message: 'the item must be a JSON object' }] });
      expect(items[3]).to.include({ ok: true, status: 'pending' });
      expect((await q.claim()).id).to.equal(items[0]!.id);
      expect((await q.claim()).id).to.equal(items[3]!.id);
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('uses the idempotency key K:n for item n, so a repeated batch creates nothing (decisions §3.8, §3.5)', async () => {
      const q = await newQueue(server, HOST);
      const first = await batchOk(q, [{ n: 0 }, { n: 1 }], { 'idempotency-key': 'K' });
      const again = await batchOk(q, [{ n: 0 }, { n: 1 }, { n: 2 }], { 'idempotency-key': 'K' });
      expect(again[0]).to.deep.equal({ ok: true, id: first[0]!.id, status: 'pending' });
      expect(again[1]).to.deep.equal({ ok: true, id: first[1]!.id, status: 'pending' });
      expect(again[2]!.id).to.not.be.oneOf([first[0]!.id, first[1]!.id]);
      // A single post with the key K:1 names the same item.
      const single = await q.postRaw({ n: 1 }, { headers: { 'idempotency-key': 'K:1' } });
      expect(single.json).to.deep.equal({ ok: true, id: first[1]!.id, status: 'pending' });
    });

    it('numbers the keys K:n by the item\'s place in the batch, invalid items counted: a key names the item at its place (decisions §3.8, §3.5)', async () => {
      const q = await newQueue(server, HOST);
      const first = await batchOk(q, [{ n: 0 }, 'not an object', { n: 2 }], { 'idempotency-key': 'P' });
      expect(first[1]!.ok).to.equal(false);
      const at2 = await q.postRaw({ n: 2 }, { headers: { 'idempotency-key': 'P:2' } });
      expect(at2.json).to.deep.equal({ ok: true, id: first[2]!.id, status: 'pending' });
      const at1 = await q.postRaw({ n: 1 }, { headers: { 'idempotency-key': 'P:1' } });
      expect((at1.json as { id: string }).id).to.not.be.oneOf([first[0]!.id, first[2]!.id]);
    });

    it('refuses a body that is not an array, an empty or too long array, and a body too large (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      for (const body of ['{"n":1}', '[]', 'not json', JSON.stringify(Array.from({ length: 1001 }, () => ({})))]) {
        const reply = await batch(q, body);
        expect(reply.status, body.slice(0, 20)).to.equal(400);
        expect((reply.json as Json).ok).to.equal(false);
        expect((reply.json as Json).errors).to.be.an('array');
      }
      // A declared length past 16 MiB is refused before the body is read: only the head is sent.
      const head = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(server.port, '127.0.0.1', () => {
          socket.write(`POST /${q.name}/batch HTTP/1.1\r\nhost: ${HOST}\r\ncontent-type: application/json\r\ncontent-length: ${16 * 1024 * 1024 + 1}\r\n\r\n[`);
        });
        let got = '';
        socket.on('data', (c: Buffer) => {
          got += c.toString();
          if (got.includes('\r\n\r\n')) {
            socket.destroy();
            resolve(got);
          }
        });
        socket.on('error', reject);
      });
      expect(head).to.match(/^HTTP\/1\.1 413 /);
      expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
    });

    it('takes 1,000 items in one request (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const items = await batchOk(q, Array.from({ length: 1000 }, (_, n) => ({ n })));
      expect(items.filter((e) => e.ok)).to.have.length(1000);
      expect(new Set(items.map((e) => e.id)).size).to.equal(1000);
    });

    it('is behind the wall for a caller without post access (decisions §4)', async () => {
      const q = await newQueue(server, HOST, { access: { post: ['nobody-here'], fetch: 'public', work: 'public' } });
      const reply = await batch(q, [{}]);
      expect(reply.status).to.equal(404);
      expect(reply.text).to.equal('{"error":"not found"}');
    });
  });

  describe('claim with max', () => {
    it('answers up to max items, oldest first, as items (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const ids = (await batchOk(q, Array.from({ length: 5 }, (_, n) => ({ n })))).map((e) => e.id!);
      const first = await q.claim({ worker: 'w', max: 3 });
      const items = first.items as Json[];
      expect(items.map((i) => i.id)).to.deep.equal(ids.slice(0, 3));
      expect(items[0]).to.deep.include({ item: { n: 0 }, attempts: 1 });
      expect((items[0]!.lease as Json).worker).to.equal('w');
      expect(Object.keys(first)).to.deep.equal(['ok', 'items']);
      expect(((await q.claim({ max: 3 })).items as Json[]).map((i) => i.id)).to.deep.equal(ids.slice(3));
      expect(await q.claim({ max: 3 })).to.deep.equal({ ok: true, items: [] });
    });

    it('with wait, is held until at least one item can be claimed (decisions §3.8, §3.3)', async () => {
      const q = await newQueue(server, HOST);
      const started = Date.now();
      const pending = q.claim({ max: 10, wait: 5 });
      await new Promise((r) => setTimeout(r, 300));
      const id = await q.post({ late: true });
      const answer = await pending;
      expect((answer.items as Json[]).map((i) => i.id)).to.deep.equal([id]);
      expect(Date.now() - started).to.be.below(3000);
      const empty = Date.now();
      expect(await q.claim({ max: 2, wait: 1 })).to.deep.equal({ ok: true, items: [] });
      expect(Date.now() - empty).to.be.at.least(900);
    });

    it('with wait, a batch posted during the wait is answered with up to max of its items, oldest first, not with one (decisions §3.8, §3.3)', async () => {
      const q = await newQueue(server, HOST);
      const pending = q.claim({ max: 3, wait: 5 });
      await new Promise((r) => setTimeout(r, 300));
      const posted = await batchOk(q, [{ n: 0 }, { n: 1 }, { n: 2 }, { n: 3 }]);
      const answer = await pending;
      expect((answer.items as Json[]).map((i) => i.id)).to.deep.equal(posted.slice(0, 3).map((e) => e.id));
      expect((await q.claim()).id).to.equal(posted[3]!.id);
    });

    it('applies criteria to every item it claims (decisions §3.8, §3.3)', async () => {
      const q = await newQueue(server, HOST);
      const items = await batchOk(q, [{ k: 'a' }, { k: 'b' }, { k: 'a' }]);
      const got = await q.claim({ max: 5, criteria: { k: 'a' } });
      expect((got.items as Json[]).map((i) => i.id)).to.deep.equal([items[0]!.id, items[2]!.id]);
    });

    it('refuses a malformed max with 400 and claims nothing (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      await q.post({});
      for (const max of [0, 101, 1.5, '2', null]) {
        const reply = await q.claimRaw({ max });
        expect(reply.status, String(max)).to.equal(400);
        expect((reply.json as Json).ok).to.equal(false);
      }
      expect((await q.claim()).attempts).to.equal(1);
    });

    it('takes max up to 100: a claim of 100 from 150 waiting gets the oldest 100 (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const items = await batchOk(q, Array.from({ length: 150 }, (_, n) => ({ n })));
      const got = await q.claim({ max: 100 });
      expect((got.items as Json[]).map((i) => i.id)).to.deep.equal(items.slice(0, 100).map((e) => e.id));
    });
  });

  describe('claim with done', () => {
    it('hands in results and errors first, then claims; answers done beside the claim (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 1 });
      const [a, b, c] = (await batchOk(q, [{ n: 0 }, { n: 1 }, { n: 2 }])).map((e) => e.id!);
      await q.claim({ max: 2 });
      const answer = await q.claim({ worker: 'w', done: [{ id: a, result: { ok: 1 } }, { id: b, error: { why: 'x' } }] });
      expect(answer).to.deep.include({ ok: true, id: c, item: { n: 2 }, attempts: 1 });
      expect(answer.done).to.deep.equal([
        { id: a, ok: true, accepted: true, status: 'finished' },
        { id: b, ok: true, accepted: true, status: 'failed' },
      ]);
      expect(await q.fetch(a!)).to.deep.include({ status: 'finished', result: { ok: 1 } });
      expect(await q.fetch(b!)).to.deep.include({ status: 'failed', error: { why: 'x' } });
    });

    it('an error handed in re-queues its item before the claim runs, so the claim may take it again (decisions §3.8, §3.2)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 3 });
      const id = await q.post({});
      await q.claim();
      const answer = await q.claim({ done: [{ id, error: { retry: true } }] });
      expect(answer).to.deep.include({ id, attempts: 2 });
      expect(answer.done).to.deep.equal([{ id, ok: true, accepted: true, status: 'pending' }]);
    });

    it('on a queue that archives payloads too, an error handed in re-queues its item before the claim runs (decisions §3.8, §5)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 3, 'svc-queue-archivePayloads': true });
      const id = await q.post({});
      await q.claim();
      const answer = await q.claim({ done: [{ id, error: { retry: true } }] });
      expect(answer).to.deep.include({ id, attempts: 2 });
      expect(answer.done).to.deep.equal([{ id, ok: true, accepted: true, status: 'pending' }]);
    });

    it('on a queue that archives payloads, hand-ins are applied in order and each accepted one is archived as sent, a later one for the same item refused (decisions §3.8, §5)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 1, 'svc-queue-archivePayloads': true });
      const a = await q.post({ n: 'a' });
      const b = await q.post({ n: 'b' });
      await q.claim({ max: 2 });
      const answer = await q.claim({ done: [{ id: a, result: { r: 1 } }, { id: b, error: { e: 1 } }, { id: a, result: { r: 2 } }] });
      expect(answer.done).to.deep.equal([
        { id: a, ok: true, accepted: true, status: 'finished' },
        { id: b, ok: true, accepted: true, status: 'failed' },
        { id: a, ok: true, accepted: false, status: 'finished' },
      ]);
      const payload = async (id: string, kind: string): Promise<string> =>
        (await q.raw('GET', `/api/v2/tasks/payload?host=${HOST}&queue=${q.name}&id=${id}&kind=${kind}`, undefined, { token: server.masterToken, host: new URL(server.url).host })).text;
      expect(await payload(a, 'result')).to.equal('{"r":1}');
      expect(await payload(b, 'error')).to.equal('{"e":1}');
      expect(await q.fetch(a)).to.deep.include({ result: { r: 1 } });
    });

    it('reports unknown, terminal and foreign items per entry, and still claims (decisions §3.8, §3.7)', async () => {
      const q = await newQueue(server, HOST);
      const other = await newQueue(server, HOST);
      const foreign = await other.post({});
      const id = await q.post({});
      await q.claim();
      await q.submit(id, 'result', { first: true });
      const next = await q.post({});
      const answer = await q.claim({
        max: 1,
        done: [
          { id: 'ffffffffffffffff', result: {} },
          { id: 'not-an-id', error: {} },
          { id, result: { second: true } },
          { id: foreign, result: {} },
        ],
      });
      expect(answer.done).to.deep.equal([
        { id: 'ffffffffffffffff', ok: false, error: 'no such item' },
        { id: 'not-an-id', ok: false, error: 'no such item' },
        { id, ok: true, accepted: false, status: 'finished' },
        { id: foreign, ok: false, error: 'no such item' },
      ]);
      expect((answer.items as Json[]).map((i) => i.id)).to.deep.equal([next]);
      expect(await q.fetch(id)).to.deep.include({ result: { first: true } });
      expect(await other.fetch(foreign)).to.deep.include({ status: 'pending' });
    });

    it('stores a handed-in result or error exactly as sent, as the result and error endpoints store a body: integers past 2^53, 1.0, 1e2 (decisions §3.8, interface §2.1)', async () => {
      const q = await newQueue(server, HOST, { maxAttempts: 1 });
      const [a, b] = (await batchOk(q, [{ n: 0 }, { n: 1 }])).map((e) => e.id!);
      await q.claim({ max: 2 });
      const result = '{"big":12345678901234567890,"f":1.0}';
      const error = '{ "e" : 1e2 }';
      const reply = await q.raw('POST', `/${q.name}/claim`, `{"done":[{"id":"${a}","result":${result}},{"error":${error},"id":"${b}"}]}`);
      expect(reply.status, reply.text).to.equal(200);
      expect((await q.fetchRaw(a!)).text).to.include(`"result":${result}`);
      expect((await q.fetchRaw(b!)).text).to.include(`"error":${error}`);
    });

    it('with nothing to claim, answers empty with the hand-ins (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({});
      await q.claim();
      expect(await q.claim({ done: [{ id, result: {} }] })).to.deep.equal({ ok: true, empty: true, done: [{ id, ok: true, accepted: true, status: 'finished' }] });
      expect(await q.claim({ max: 5, done: [] })).to.deep.equal({ ok: true, items: [], done: [] });
    });

    it('refuses a malformed done with 400 and applies nothing of the request (decisions §3.8)', async () => {
      const q = await newQueue(server, HOST);
      const id = await q.post({});
      await q.claim();
      await q.post({ waiting: true });
      const bad = [
        'not an array',
        [{ id }],
        [{ id, result: {}, error: {} }],
        [{ id, result: 'text' }],
        [{ id, result: {}, extra: 1 }],
        [{ id: 7, result: {} }],
        [{ id, result: {} }, 'x'],
        Array.from({ length: 101 }, () => ({ id, result: {} })),
      ];
      for (const done of bad) {
        const reply = await q.claimRaw({ done });
        expect(reply.status, JSON.stringify(done).slice(0, 40)).to.equal(400);
        expect((reply.json as Json).ok).to.equal(false);
      }
      // A valid entry beside a malformed one was not applied, and nothing was claimed.
      expect((await q.claimRaw({ done: [{ id, result: {} }, { id }] })).status).to.equal(400);
      expect(await q.fetch(id)).to.include({ status: 'claimed' });
      expect((await q.claim()).item).to.deep.equal({ waiting: true });
    });
  });

  it('batches, claims with max and hand-ins are durable before their 200: all survive kill -9 (decisions §3.8, §6)', async () => {
    const own = await startServer();
    try {
      const q = await newQueue(own, HOST, { maxAttempts: 1 });
      const posted = (await batchOk(q, Array.from({ length: 6 }, (_, n) => ({ n })), { 'idempotency-key': 'crash' })).map((e) => e.id!);
      const claimed = ((await q.claim({ worker: 'w', max: 4 })).items as Json[]).map((i) => i.id as string);
      const handed = await q.claim({ worker: 'w', max: 1, done: [{ id: claimed[0]!, result: { r: 0 } }, { id: claimed[1]!, error: { e: 1 } }] });
      expect((handed.items as Json[]).map((i) => i.id)).to.deep.equal([posted[4]]);
      await own.kill9();
      const again = await startServer({ root: own.root, masterToken: own.masterToken });
      try {
        const q2 = new QueueApi(again, HOST, q.name);
        expect(await q2.fetch(claimed[0]!)).to.deep.include({ status: 'finished', result: { r: 0 } });
        expect(await q2.fetch(claimed[1]!)).to.deep.include({ status: 'failed', error: { e: 1 } });
        for (const id of [claimed[2]!, claimed[3]!, posted[4]!]) expect(await q2.fetch(id)).to.include({ status: 'claimed', attempts: 1 });
        expect(await q2.fetch(posted[5]!)).to.include({ status: 'pending' });
        const repeat = await batchOk(q2, Array.from({ length: 6 }, (_, n) => ({ n })), { 'idempotency-key': 'crash' });
        expect(repeat.map((e) => e.id)).to.deep.equal(posted);
      } finally {
        await again.stop();
      }
    } finally {
      await own.kill9();
      cleanupTemp(own.root);
    }
  });
});
