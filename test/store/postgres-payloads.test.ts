import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { readPayload } from '../../src/store/postgres/pg-payloads.js';
import { StoreUnavailable, type QueueRef } from '../../src/store/store.js';
import { FakeClock, freshDatabase, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * Archived payloads in the shared database (decisions §5 payloads, §6.1): with
 * `svc-queue-archivePayloads` on, the exact bytes of the item, the latest accepted progress, the
 * result and the latest error are kept per item, written in the transaction of the change that
 * accepted them, readable from every node, and kept after retention removed the item.
 */

const target = await postgresUnderTest();
const HOST = 'payloads.example.com';

describe('PostgreSQL store: archived payloads (decisions §5, §6.1)', function () {
  this.timeout(30_000);
  let db: { url: string; drop: () => Promise<void> };
  let a: PostgresStore;
  let b: PostgresStore;
  let clock: FakeClock;
  const archived = resolveQueue({ leaseSeconds: 10, maxAttempts: 2, retainSeconds: 60, 'svc-queue-archivePayloads': true });
  const plain = resolveQueue({ leaseSeconds: 10, maxAttempts: 2, retainSeconds: 60 });
  const q: QueueRef = { key: `${HOST}/kept`, host: HOST, name: 'kept', config: archived };
  const off: QueueRef = { key: `${HOST}/plain`, host: HOST, name: 'plain', config: plain };
  const text = (b: Buffer | null): string | null => (b === null ? null : b.toString('utf8'));

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabase(target.url);
      clock = new FakeClock();
      // Two nodes on one database.
      a = new PostgresStore({ url: db.url, now: clock.now, configFor: () => archived, sweepIntervalMs: 0 });
      b = new PostgresStore({ url: db.url, now: clock.now, configFor: () => archived, sweepIntervalMs: 0 });
      await a.open();
      await b.open();
    });
    afterEach(async () => {
      await a.close().catch(() => undefined);
      await b.close().catch(() => undefined);
      await db.drop();
    });
  }

  it('keeps the item, the latest progress, the result and the latest error byte for byte, readable from every node (decisions §5, §6.1)', async () => {
    const body = ' {\n\t"name" : "naïve ☕ 𝄞",  "n": 1.50 }  ';
    const { id } = await a.post(q, { body, postedBy: 'p' });
    expect(text(await b.readPayload(HOST, 'kept', id, 'item'))).to.equal(body);
    expect(Buffer.compare((await b.readPayload(HOST, 'kept', id, 'item'))!, Buffer.from(body, 'utf8'))).to.equal(0);

    await a.claim(q, { worker: 'w' });
    await a.progress(q, id, '{"pct": 10}');
    await b.progress(q, id, '{"pct": 90, "note": "ünïcode"}');
    expect(text(await a.readPayload(HOST, 'kept', id, 'progress')), 'the latest progress').to.equal('{"pct": 90, "note": "ünïcode"}');
    await b.error(q, id, '{"why": "first"}');
    await a.claim(q, { worker: 'w' });
    await a.error(q, id, '{"why": "second"}');
    expect(text(await b.readPayload(HOST, 'kept', id, 'error')), 'the latest error').to.equal('{"why": "second"}');
    expect((await a.get(q, id))?.status).to.equal('failed');
    expect(await a.readPayload(HOST, 'kept', id, 'result'), 'no result was sent').to.equal(null);

    const [x, y] = await b.postMany(q, [{ body: '{"batch":1}', postedBy: 'p' }, { body: '{"batch":2}', postedBy: 'p' }]);
    await a.claimMany(q, { worker: 'w' }, 2);
    await a.result(q, x!.id, '{"done": true}\n');
    expect(text(await b.readPayload(HOST, 'kept', x!.id, 'result'))).to.equal('{"done": true}\n');
    expect(text(await b.readPayload(HOST, 'kept', y!.id, 'item'))).to.equal('{"batch":2}');
  });

  it('archives nothing for a queue without svc-queue-archivePayloads, and nothing for a submission that was not accepted (decisions §5)', async () => {
    const { id } = await a.post(off, { body: '{"a":1}', postedBy: 'p' });
    await a.claim(off, { worker: 'w' });
    await a.result(off, id, '{"r":1}');
    for (const kind of ['item', 'progress', 'result', 'error'] as const) expect(await a.readPayload(HOST, 'plain', id, kind)).to.equal(null);

    const kept = await a.post(q, { body: '{"b":1}', postedBy: 'p' });
    await a.claim(q, { worker: 'w' });
    await a.result(q, kept.id, '{"first":true}');
    // A terminal item refuses later submissions (interface §4.2): nothing of them is archived.
    expect((await b.result(q, kept.id, '{"second":true}'))?.accepted).to.equal(false);
    expect((await b.progress(q, kept.id, '{"late":true}'))?.accepted).to.equal(false);
    expect(text(await a.readPayload(HOST, 'kept', kept.id, 'result'))).to.equal('{"first":true}');
    expect(await a.readPayload(HOST, 'kept', kept.id, 'progress')).to.equal(null);
    // A post that found an earlier item by its idempotency key created nothing: the item's bytes stay the first.
    const first = await a.post(q, { body: '{"key":"first"}', postedBy: 'p', idempotencyKey: 'k1' });
    const again = await b.post(q, { body: '{"key":"again"}', postedBy: 'p', idempotencyKey: 'k1' });
    expect(again).to.deep.include({ id: first.id, created: false });
    expect(text(await a.readPayload(HOST, 'kept', first.id, 'item'))).to.equal('{"key":"first"}');
  });

  it('a change that is not committed leaves no payload: the payload is written in its transaction (decisions §5, §6)', async () => {
    const { id } = await a.post(q, { body: '{"c":1}', postedBy: 'p' });
    await a.claim(q, { worker: 'w' });
    // PostgreSQL text cannot hold U+0000: the item's UPDATE is refused, so its transaction is rolled back.
    const refused = await a.result(q, id, '{"x":"\u0000"}').then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).to.be.instanceOf(StoreUnavailable);
    expect(await b.readPayload(HOST, 'kept', id, 'result')).to.equal(null);
    expect((await b.get(q, id))?.status).to.equal('claimed');
  });

  it('payloads survive retention: the item is purged, its payloads stay (decisions §5)', async () => {
    const { id } = await a.post(q, { body: '{"old":1}', postedBy: 'p' });
    await a.claim(q, { worker: 'w' });
    await a.result(q, id, '{"r":"kept"}');
    clock.advance(61_000);
    // Any call on the queue applies what is due first: here the retention.
    expect(await b.get(q, id)).to.equal(null);
    expect(text(await a.readPayload(HOST, 'kept', id, 'item'))).to.equal('{"old":1}');
    expect(text(await b.readPayload(HOST, 'kept', id, 'result'))).to.equal('{"r":"kept"}');
  });

  it('readPayload also reads through any statement runner, and a node that cannot reach the database refuses with StoreUnavailable', async () => {
    const { id } = await a.post(q, { body: '{"p":1}', postedBy: 'p' });
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const read = (sql: string, values: unknown[]) => client.query<{ body: Buffer }>(sql, values);
      expect(text(await readPayload(read, HOST, 'kept', id, 'item'))).to.equal('{"p":1}');
      expect(await readPayload(read, HOST, 'kept', '0000000000000000', 'item')).to.equal(null);
    } finally {
      await client.end();
    }
    await b.close();
    const closed = await b.readPayload(HOST, 'kept', id, 'item').then(
      () => null,
      (err: unknown) => err,
    );
    expect(closed).to.be.instanceOf(StoreUnavailable);
  });
});
