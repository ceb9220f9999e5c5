import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import type { TaskEventKind } from '../../src/engine/item.js';
import { failureKind } from '../../src/store/postgres/pg-errors.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { StoreUnavailable, type QueueRef } from '../../src/store/store.js';
import { claimTopic, InProcessNotifier } from '../../src/waiting/notifier.js';
import { silentProxy } from './support/silent-proxy.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest, START } from './support/stores.js';

/**
 * What the PostgreSQL store does beyond the conformance suite: calls folded into one transaction,
 * task events in the transaction of their change, deadlines applied with no traffic, and one
 * refused statement failing only its own call.
 */

const target = await postgresUnderTest();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/** Reads until what it read passes `done`, every 20 ms, for `ms` at most (a loaded machine may sweep late); the last read. */
async function readUntil<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() >= end) return value;
    await sleep(20);
  }
}

describe('PostgreSQL store: transactions, events and sweeps', function () {
  this.timeout(30_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let admin: pg.Client;
  let store: PostgresStore;
  let clock: FakeClock;
  let commits: Array<{ seconds: number; changes: number }>;
  let events: Array<{ key: string; kinds: readonly TaskEventKind[] }>;
  const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 1, retainSeconds: 60 });
  const q: QueueRef = { key: 'tx.example.com/q', host: 'tx.example.com', name: 'q', config };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url, true);
      admin = db.admin;
      clock = new FakeClock();
      commits = [];
      events = [];
      store = new PostgresStore({
        url: db.url,
        now: clock.now,
        configFor: (key) => (key === q.key ? config : undefined),
        sweepIntervalMs: 50,
        observer: { committed: (seconds, changes) => commits.push({ seconds, changes }), events: (key, kinds) => events.push({ key, kinds }) },
      });
      await store.open();
    });
    afterEach(async () => {
      await store.close();
      await db.drop();
    });
  }

  it('warns at open when the server does not vacuum on its own, and only then (docs/scaling.md: Run several nodes asks for autovacuum)', async () => {
    const { rows } = await admin.query<{ autovacuum: string; track_counts: string }>("SELECT current_setting('autovacuum') AS autovacuum, current_setting('track_counts') AS track_counts");
    const warnings: string[] = [];
    const other = new PostgresStore({ url: db.url, now: clock.now, configFor: () => undefined, warn: (line) => warnings.push(line) });
    await other.open();
    await other.close();
    const vacuumWarnings = warnings.filter((w) => /vacuum/.test(w));
    if (rows[0]!.autovacuum === 'off' || rows[0]!.track_counts === 'off') {
      expect(vacuumWarnings).to.have.length(1);
      expect(vacuumWarnings[0]).to.match(/^(autovacuum|track_counts)( and track_counts)? (is|are) off on this PostgreSQL server: the items and count tables will grow/);
      if (rows[0]!.autovacuum === 'off') expect(vacuumWarnings[0]).to.include('autovacuum');
    } else {
      expect(vacuumWarnings).to.deep.equal([]);
    }
  });

  it('posts made in the same turn are folded into one transaction, one commit, in the order they were made (decisions §6: group-committed)', async () => {
    const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => store.post(q, { body: JSON.stringify({ i }), postedBy: 'p' })));
    expect(commits.map((c) => c.changes)).to.deep.equal([50]);
    expect(events).to.deep.equal([{ key: q.key, kinds: Array(50).fill('posted') }]);
    const claimed = await store.claimMany(q, { worker: 'w' }, 50);
    expect(claimed.map((c) => c.id)).to.deep.equal(outcomes.map((o) => o.id));
  });

  it('claims and submissions made in the same turn share one commit too, and each claim takes a different item (decisions §6)', async () => {
    const posted = await store.postMany(q, Array.from({ length: 10 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
    commits = [];
    const claims = await Promise.all(Array.from({ length: 12 }, (_, i) => store.claim(q, { worker: `w${i}` })));
    expect(commits.length).to.equal(1);
    expect(claims.slice(0, 10).map((c) => c?.id)).to.deep.equal(posted.map((o) => o.id));
    expect(claims.slice(10)).to.deep.equal([null, null]);
    commits = [];
    const answers = await Promise.all(posted.map((o, i) => (i % 2 === 0 ? store.result(q, o.id, '{"ok":true}') : store.error(q, o.id, '{"ok":false}'))));
    expect(answers.map((a) => a?.status)).to.deep.equal(posted.map((_, i) => (i % 2 === 0 ? 'finished' : 'failed')));
    expect(commits.length).to.equal(1);
  });

  it('while a transaction runs, a few calls made after it wait to go together in the next one rather than each start a commit of their own (decisions §6: group-committed)', async () => {
    // A store that holds the calls behind a running transaction for as long as it runs (the
    // default lets a second transaction take them after 5 ms, which a loaded machine can spend
    // between two turns of its event loop).
    await store.close();
    store = new PostgresStore({ url: db.url, now: clock.now, secondTransactionAfterMs: 60_000, observer: { committed: (seconds, changes) => commits.push({ seconds, changes }), events: () => undefined } });
    await store.open();
    await store.post(q, { body: '{"warm":true}', postedBy: 'p' });
    commits = [];
    // Another session keeps the first transaction's insert waiting until every call is made.
    await admin.query('BEGIN');
    await admin.query('LOCK TABLE svcq_items IN SHARE MODE');
    // One call starts a transaction; then, turn after turn, one more call each while it runs.
    const calls = [store.post(q, { body: '{"first":true}', postedBy: 'p' })];
    for (let i = 0; i < 5; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      calls.push(store.post(q, { body: JSON.stringify({ i }), postedBy: 'p' }));
    }
    await admin.query('COMMIT');
    await Promise.all(calls);
    // The five go together (a second transaction for the second call alone made three commits: 1, 1, 4).
    expect(commits.map((c) => c.changes).sort()).to.deep.equal([1, 5]);
  });

  it('a transaction held up (a row another session locks) holds the calls behind it only a few milliseconds: a second transaction takes them (decisions §6)', async () => {
    const [held] = await store.postMany(q, [{ body: '{"held":true}', postedBy: 'p' }]);
    const other = await store.claim(q, { worker: 'w' });
    expect(other?.id).to.equal(held!.id);
    // Another session holds the item's row: the result for it waits in its transaction.
    await admin.query('BEGIN');
    await admin.query('SELECT 1 FROM svcq_items WHERE id = $1 FOR UPDATE', [held!.id]);
    try {
      const stuck = store.result(q, held!.id, '{"done":true}');
      await sleep(50);
      const t0 = Date.now();
      const posted = await store.post(q, { body: '{"behind":true}', postedBy: 'p' });
      expect(Date.now() - t0).to.be.below(1000);
      expect(posted.created).to.equal(true);
      await admin.query('COMMIT');
      expect((await stuck)?.status).to.equal('finished');
    } finally {
      await admin.query('ROLLBACK').catch(() => undefined);
    }
  });

  it('calls folded into one transaction see each other\'s changes before any is written: a claim never takes an item finished, cancelled or claimed earlier in it (decisions §6, §3.2)', async () => {
    const [a, b, c, d] = await store.postMany(q, Array.from({ length: 4 }, (_, i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
    commits = [];
    // In one turn: a result for pending a, a cancel of pending b, a claim with criteria that takes
    // c, then plain claims: only d is left for them.
    const [ra, cb, cc, claims] = await Promise.all([
      store.result(q, a!.id, '{"early":true}'),
      store.cancel(q, b!.id),
      store.claim(q, { worker: 'picky', criteria: { i: { gte: 0 } } }),
      Promise.all([store.claim(q, { worker: 'w1' }), store.claim(q, { worker: 'w2' })]),
    ]);
    expect(commits.length).to.equal(1);
    expect([ra?.status, cb?.status]).to.deep.equal(['finished', 'cancelled']);
    expect(cc?.id).to.equal(c!.id);
    expect(claims.map((x) => x?.id ?? null)).to.deep.equal([d!.id, null]);
    // Then a submission for an item claimed in the same turn applies to the claimed record.
    const [e] = await store.postMany(q, [{ body: '{"i":9}', postedBy: 'p' }]);
    const [claimedE, resultE] = await Promise.all([store.claim(q, { worker: 'w3' }), store.result(q, e!.id, '{"done":1}')]);
    expect(claimedE?.id).to.equal(e!.id);
    expect(resultE).to.deep.equal({ accepted: true, status: 'finished' });
    expect(await store.get(q, e!.id)).to.deep.include({ status: 'finished', attempts: 1 });
    const counts = await store.counts(q);
    expect(counts).to.deep.equal({ finished: 2, cancelled: 1, claimed: 2 });
    const overview = await store.overview(q, { oldest: 0, leases: 0 });
    expect(overview.counts).to.deep.include({ pending: 0, claimed: 2, finished: 2, cancelled: 1 });
  });

  it('a claim sent before the transaction writes its staged changes early still sees them: an item cancelled in one queue is not claimed because an error re-queued an item of another queue in the same turn (decisions §6, §3.6, §3.8)', async () => {
    const retrying = resolveQueue({ leaseSeconds: 60, maxAttempts: 3, retainSeconds: 600 });
    const qa: QueueRef = { key: 'tx.example.com/a', host: 'tx.example.com', name: 'a', config: retrying };
    const qb: QueueRef = { key: 'tx.example.com/b', host: 'tx.example.com', name: 'b', config: retrying };
    const two = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0, configFor: (key) => (key === qa.key ? retrying : key === qb.key ? retrying : undefined) });
    await two.open();
    try {
      const [a1] = await two.postMany(qa, [{ body: '{"a":1}', postedBy: 'p' }]);
      const [b1] = await two.postMany(qb, [{ body: '{"b":1}', postedBy: 'p' }]);
      expect((await two.claim(qa, { worker: 'w' }))?.id).to.equal(a1!.id);
      // In one turn, so one transaction: b1 cancelled, a1's error re-queues it, then a claim on
      // each queue. The claim on a must see a1 pending again, so the transaction writes what it
      // staged before that claim; the claim on b, already sent by then, must still see b1
      // cancelled (else it leases a cancelled item, and the transaction fails its guard every time
      // it runs again).
      const [cancelled, errored, fromB, fromA] = await Promise.all([
        two.cancel(qb, b1!.id),
        two.error(qa, a1!.id, '{"oops":true}'),
        two.claim(qb, { worker: 'wb' }),
        two.claim(qa, { worker: 'wa' }),
      ]);
      expect(cancelled).to.deep.equal({ accepted: true, status: 'cancelled' });
      expect(errored).to.deep.equal({ accepted: true, status: 'pending' });
      expect(fromB).to.equal(null);
      expect(fromA?.id).to.equal(a1!.id);
      expect(await two.get(qb, b1!.id)).to.deep.include({ status: 'cancelled' });
      expect(await two.get(qa, a1!.id)).to.deep.include({ status: 'claimed', attempts: 2 });
    } finally {
      await two.close();
    }
  });

  it('the periodic sweep passes over a queue where nothing can fall due (its quiet window), at most 30 times in a row, and still applies a lease end once it falls (decisions §3.2, §6.1)', async () => {
    const calm = resolveQueue({ leaseSeconds: 60, retainSeconds: 600 });
    const qc: QueueRef = { key: 'tx.example.com/idle', host: 'tx.example.com', name: 'idle', config: calm };
    const two = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0, configFor: (key) => (key === qc.key ? calm : undefined) });
    await two.open();
    try {
      const [a] = await two.postMany(qc, [{ body: '{"a":1}', postedBy: 'p' }]);
      expect((await two.claim(qc, { worker: 'w' }))?.id).to.equal(a!.id);
      // The post's transaction swept the queue, its first, and opened its quiet window (50 s: nothing
      // set from then on can fall due sooner than a lease, 60 s, less 10 s for other nodes).
      const swept = two.queueSweeps;
      for (let n = 0; n < 30; n++) await two.sweepNow();
      expect(two.queueSweeps, '30 periodic sweeps inside the window').to.equal(swept);
      await two.sweepNow();
      expect(two.queueSweeps, 'the 31st sweeps it all the same').to.equal(swept + 1);
      await two.sweepNow();
      expect(two.queueSweeps).to.equal(swept + 1);

      // Past the lease's end, the next periodic sweep applies it (the row itself, not a read that would apply it too).
      clock.advance(60_001);
      await two.sweepNow();
      expect(two.queueSweeps).to.equal(swept + 2);
      const row = await admin.query<{ status: string; attempts: number }>('SELECT status, attempts FROM svcq_items WHERE id = $1', [a!.id]);
      expect(row.rows[0]).to.deep.equal({ status: 'pending', attempts: 1 });
    } finally {
      await two.close();
    }
  });

  it('a lease taken under rules in force between two changes of the queue\'s definition ends on time: a quiet window found under the rules before is cut short by it, and the periodic sweep applies it (decisions §3.2, §6.1)', async () => {
    const long = resolveQueue({ leaseSeconds: 600, maxAttempts: 3 });
    const short = resolveQueue({ leaseSeconds: 5, maxAttempts: 3 });
    let rules = long;
    const key = 'tx.example.com/reverted';
    const ref = (): QueueRef => ({ key, host: 'tx.example.com', name: 'reverted', config: rules });
    const two = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0, configFor: (k) => (k === key ? rules : undefined) });
    await two.open();
    try {
      const [a, b] = await two.postMany(ref(), [{ body: '{"a":1}', postedBy: 'p' }, { body: '{"b":2}', postedBy: 'p' }]);
      // The post's sweep opened the queue's quiet window under leases of 600 s (590 s long).
      expect((await two.claim(ref(), { worker: 'w1' }))?.id).to.equal(a!.id);
      // For a moment the definition says 5 s: a claim then takes a lease of 5 s. Then it is put back.
      rules = short;
      expect((await two.claim(ref(), { worker: 'w2' }))?.id).to.equal(b!.id);
      rules = long;
      clock.advance(5_001);
      await two.sweepNow();
      const row = await admin.query<{ status: string; attempts: number }>('SELECT status, attempts FROM svcq_items WHERE id = $1', [b!.id]);
      expect(row.rows[0], 'the 5 s lease ended at the first sweep after it').to.deep.equal({ status: 'pending', attempts: 1 });
    } finally {
      await two.close();
    }
  });

  it('an error handed in with a claim for an item waiting out a retry delay its queue has since shortened makes it claimable by that claim, as one by one (decisions §3.2, §3.8)', async () => {
    let rules = resolveQueue({ leaseSeconds: 3, maxAttempts: 3, retryDelaySeconds: 30 });
    const key = 'tx.example.com/shortened';
    const ref = (): QueueRef => ({ key, host: 'tx.example.com', name: 'shortened', config: rules });
    const two = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0, configFor: (k) => (k === key ? rules : undefined) });
    await two.open();
    try {
      const [a] = await two.postMany(ref(), [{ body: '{"a":1}', postedBy: 'p' }]);
      expect((await two.claim(ref(), { worker: 'w1' }))?.id).to.equal(a!.id);
      // The lease ends: the item waits out the 30 s retry delay.
      clock.advance(3_500);
      await two.sweepNow();
      expect(await two.claim(ref(), { worker: 'w1' })).to.equal(null);
      // The definition drops the delay; the late error of the first worker re-queues the item, claimable at once.
      rules = resolveQueue({ leaseSeconds: 3, maxAttempts: 3 });
      const [errored, claimed] = await Promise.all([two.error(ref(), a!.id, '{"late":true}'), two.claim(ref(), { worker: 'w2' })]);
      expect(errored).to.deep.equal({ accepted: true, status: 'pending' });
      expect(claimed?.id).to.equal(a!.id);
      expect(claimed?.attempts).to.equal(2);
    } finally {
      await two.close();
    }
  });

  it('in a queue where nothing can be due, claims go out without waiting for the submissions before them, yet keep the fold\'s order: they pass by items posted after them, and take an item an error re-queued before them (decisions §3.3, §3.8, §6)', async () => {
    // Every deadline a minute out: after its first sweep the queue is skipped by the sweeps of the
    // transactions that follow (its quiet window), and nothing in it can be due.
    const calm = resolveQueue({ leaseSeconds: 60, maxAttempts: 3, retainSeconds: 600 });
    const qc: QueueRef = { key: 'tx.example.com/calm', host: 'tx.example.com', name: 'calm', config: calm };
    const two = new PostgresStore({ url: db.url, now: clock.now, sweepIntervalMs: 0, configFor: (key) => (key === qc.key ? calm : undefined) });
    await two.open();
    try {
      const [a] = await two.postMany(qc, [{ body: '{"a":1}', postedBy: 'p' }]);
      // One transaction: a progress report makes a processing, a claim, then a post. The claim's
      // first page holds only a (the table still shows it pending, the progress not yet known when
      // the claim went out); its next page, read after the post went out, must pass b by.
      const [progressed, claimed, posted] = await Promise.all([two.progress(qc, a!.id, '{"p":1}'), two.claim(qc, { worker: 'w' }), two.post(qc, { body: '{"b":1}', postedBy: 'p' })]);
      expect(progressed).to.deep.equal({ accepted: true, status: 'processing' });
      expect(claimed).to.equal(null);
      expect(await two.get(qc, posted.id)).to.deep.include({ status: 'pending', attempts: 0 });
      // One transaction: an error handed in re-queues a (no retry delay), then a claim: the claim
      // waits for the error's answer and takes a, the oldest pending item.
      const [errored, next] = await Promise.all([two.error(qc, a!.id, '{"oops":true}'), two.claim(qc, { worker: 'w2' })]);
      expect(errored).to.deep.equal({ accepted: true, status: 'pending' });
      expect(next?.id).to.equal(a!.id);
      expect(next?.attempts).to.equal(1);
    } finally {
      await two.close();
    }
  });

  it('a status read that no rule applies to runs no transaction; the first read of a finished item stamps it in one (retention from "fetched" starts there, decisions §2.2)', async () => {
    const [a] = await store.postMany(q, [{ body: '{"n":1}', postedBy: 'p' }]);
    commits = [];
    const reads = await Promise.all(Array.from({ length: 20 }, () => store.get(q, a!.id)));
    expect(reads.every((r) => r?.status === 'pending')).to.equal(true);
    expect(await store.get(q, 'ffffffffffffffff')).to.equal(null);
    expect(commits).to.deep.equal([]);
    await store.result(q, a!.id, '{"ok":true}');
    commits = [];
    expect(await store.get(q, a!.id)).to.deep.include({ status: 'finished' });
    const { rows } = await admin.query<{ fetched_at: string | null }>('SELECT fetched_at FROM svcq_items WHERE id = $1', [a!.id]);
    expect(Number(rows[0]!.fetched_at)).to.equal(clock.now());
    expect(commits.map((c) => c.changes)).to.deep.equal([1]);
    expect(await store.get(q, a!.id)).to.deep.include({ status: 'finished' });
    expect(commits.length).to.equal(1);
  });

  it('task events are written in the transaction of their change, as TaskEvent lines (decisions §5)', async () => {
    const { id } = await store.post(q, { body: '{}', postedBy: 'p' });
    clock.advance(5);
    await store.claim(q, { worker: 'w-1' });
    await store.progress(q, id, '{"pct":1}');
    clock.advance(10_000);
    // The heartbeat ran the lease to +10 s from +5 ms; the last attempt's lease end fails the item.
    expect(await store.get(q, id)).to.deep.include({ status: 'failed' });
    const res = await admin.query('SELECT ts, host, queue, id, event, attempts, status, worker FROM svcq_events ORDER BY seq');
    expect(res.rows.map((r) => ({ ...r, ts: Number(r.ts) }))).to.deep.equal([
      { ts: START, host: q.host, queue: q.name, id, event: 'posted', attempts: 0, status: 'pending', worker: null },
      { ts: START + 5, host: q.host, queue: q.name, id, event: 'claimed', attempts: 1, status: 'claimed', worker: 'w-1' },
      { ts: START + 5, host: q.host, queue: q.name, id, event: 'progress', attempts: 1, status: 'processing', worker: 'w-1' },
      { ts: START + 10_005, host: q.host, queue: q.name, id, event: 'failed', attempts: 1, status: 'failed', worker: 'w-1' },
    ]);
  });

  it('deadlines are applied by the periodic sweep with no request at all (decisions §6.1)', async () => {
    const { id } = await store.post(q, { body: '{}', postedBy: 'p' });
    await store.claim(q, { worker: 'w' });
    clock.advance(10_000);
    // Nothing is asked of the store from here on: only its sweep (every 50 ms) can make these changes.
    const row = await readUntil(async () => (await admin.query('SELECT status, error FROM svcq_items WHERE id = $1', [id])).rows[0], (r) => r?.status !== 'claimed');
    expect(row).to.deep.equal({ status: 'failed', error: '{"reason":"lease expired"}' });
    clock.advance(60_000);
    const left = await readUntil(async () => (await admin.query('SELECT count(*)::integer AS n FROM svcq_items')).rows[0].n as number, (n) => n === 0);
    expect(left).to.equal(0);
    const kinds = (await admin.query('SELECT event FROM svcq_events ORDER BY seq')).rows.map((r) => r.event);
    expect(kinds).to.deep.equal(['posted', 'claimed', 'failed', 'purged']);
  });

  it('bodies are kept byte for byte: whitespace, escapes and characters outside the BMP (interface §2.1)', async () => {
    const body = '{ "a" : "\\u00e9 é \u{1F600}",\n\t"n": 1.50e3 , "z":[ ] }';
    const { id } = await store.post(q, { body, postedBy: 'p' });
    expect((await store.claim(q, { worker: 'w' }))?.item).to.equal(body);
    await store.result(q, id, '{"r" :  "\u{1F600}"}');
    expect((await store.get(q, id))?.result).to.equal('{"r" :  "\u{1F600}"}');
  });

  it('a network that stops answering without closing the connection: the transaction is cut after transactionTimeoutMs and its calls refused with StoreUnavailable, not held; it serves again once the network answers (decisions §6.1)', async () => {
    const proxy = await silentProxy(db.url);
    const silent = proxy.silent;
    const viaProxy = new PostgresStore({ url: proxy.url, now: clock.now, configFor: () => config, sweepIntervalMs: 0, transactionTimeoutMs: 1000 });
    await viaProxy.open();
    try {
      await viaProxy.post(q, { body: '{"n":1}', postedBy: 'p' });
      silent.on = true;
      const t0 = Date.now();
      const refused = await viaProxy.post(q, { body: '{"n":2}', postedBy: 'p' }).then(
        () => null,
        (err: Error) => err,
      );
      expect(refused).to.be.instanceOf(StoreUnavailable);
      expect(refused!.message).to.match(/did not answer within 1 s/);
      expect(Date.now() - t0).to.be.below(4000);
      silent.on = false;
      expect((await viaProxy.post(q, { body: '{"n":3}', postedBy: 'p' })).status).to.equal('pending');
    } finally {
      await viaProxy.close();
      proxy.close();
    }
    // The lost bytes never reached the database: n:2 was not posted (a change is either answered or gone).
    const bodies = (await admin.query<{ body: string }>('SELECT body FROM svcq_items ORDER BY posted_at')).rows.map((r) => r.body);
    expect(bodies).to.deep.equal(['{"n":1}', '{"n":3}']);
  });

  it('a network that stops answering: reads outside transactions (a status read, the operators\' view, a payload, the task history) are refused after transactionTimeoutMs too, and answer again once it does (decisions §6.1)', async () => {
    const proxy = await silentProxy(db.url);
    const viaProxy = new PostgresStore({ url: proxy.url, now: clock.now, configFor: () => config, sweepIntervalMs: 0, transactionTimeoutMs: 1000 });
    await viaProxy.open();
    try {
      const { id } = await viaProxy.post(q, { body: '{"n":1}', postedBy: 'p' });
      proxy.silent.on = true;
      const reads: Array<[string, () => Promise<unknown>]> = [
        ['status read', () => viaProxy.get(q, id)],
        ['operators\' view', () => viaProxy.overview(q, { oldest: 5, leases: 5 })],
        ['payload', () => viaProxy.readPayload('tx.example.com', 'q', id, 'item')],
        ['task history', () => (viaProxy.readEvents(0, 10), viaProxy.catchUp())],
      ];
      const t0 = Date.now();
      const outcomes = await Promise.all(reads.map(([, read]) => read().then(() => null, (err: Error) => err)));
      for (const [i, [what]] of reads.entries()) {
        expect(outcomes[i], what).to.be.instanceOf(StoreUnavailable);
        expect(outcomes[i]!.message, what).to.match(/could not read its store/);
        // A statement on a connection the pool held, or a new connection that never finished its handshake.
        expect((outcomes[i] as StoreUnavailable).cause.message, what).to.match(/did not answer within 1 s|timeout exceeded when trying to connect/);
      }
      expect(Date.now() - t0, 'refused within about transactionTimeoutMs, not held until TCP gives up').to.be.below(4000);
      proxy.silent.on = false;
      expect((await viaProxy.get(q, id))?.status).to.equal('pending');
      expect((await viaProxy.overview(q, { oldest: 5, leases: 0 })).oldest.map((o) => o.id)).to.deep.equal([id]);
    } finally {
      await viaProxy.close();
      proxy.close();
    }
  });

  it('a statement the database refuses fails only its own call; the calls folded with it are made (decisions §6)', async () => {
    // PostgreSQL text cannot hold U+0000: this post's INSERT is refused.
    const bad = store.post(q, { body: '{}', postedBy: 'nul\u0000' });
    const good = Promise.all([store.post(q, { body: '{"ok":1}', postedBy: 'p' }), store.post(q, { body: '{"ok":2}', postedBy: 'p' })]);
    const refused = await bad.then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).to.be.instanceOf(StoreUnavailable);
    const made = await good;
    expect(made.every((o) => o.created)).to.equal(true);
    expect((await store.counts(q)).pending).to.equal(2);
  });
});

describe('PostgreSQL store: the last write and the COMMIT sent together', function () {
  this.timeout(30_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let store: PostgresStore;
  const config = resolveQueue({ leaseSeconds: 10 });
  const q: QueueRef = { key: 'pipe.example.com/q', host: 'pipe.example.com', name: 'q', config };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url, true);
      store = new PostgresStore({ url: db.url, configFor: () => config });
      await store.open();
    });
    afterEach(async () => {
      await store.close();
      await db.drop();
    });
  }

  it('a guarded write that lost a race aborts its transaction, so the COMMIT sent right behind it commits nothing, the error is one the store runs its calls again for (decisions §6: nothing uncommitted is answered)', async () => {
    const { id } = await store.post(q, { body: '{}', postedBy: 'p' });
    // What the store's last statement does when a guard fails, on a connection that pipelines as
    // the store's do: BEGIN, a write, the failed guard and the COMMIT, all sent before any answer.
    const client = new pg.Client({ connectionString: db.url, pipeline: true });
    await client.connect();
    try {
      const begun = client.query('BEGIN');
      const write = client.query(`UPDATE svcq_items SET status = 'failed' WHERE queue = $1 AND id = $2`, [q.key, id]);
      const guard = client.query(`SELECT svcq_stale_write('1 item(s)')`);
      const commit = client.query('COMMIT');
      await begun;
      expect((await write).rowCount).to.equal(1);
      const err = await guard.then(
        () => null,
        (e: unknown) => e,
      );
      expect((err as Error).message).to.equal('a write lost a race: 1 item(s) changed under it');
      expect(failureKind(err)).to.equal('retry');
      expect((await commit).command).to.equal('ROLLBACK');
    } finally {
      await client.end();
    }
    expect((await store.get(q, id))?.status).to.equal('pending');
    // The store's own transactions go on as before on its pipelined connections.
    expect((await store.claim(q, { worker: 'w' }))?.id).to.equal(id);
    expect((await store.result(q, id, '{}'))?.status).to.equal('finished');
  });
});

describe('PostgreSQL store: deadlines applied as they fall, on the real clock', function () {
  this.timeout(30_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> } | undefined;
  let store: PostgresStore | undefined;
  afterEach(async () => {
    await store?.close();
    await db?.drop();
    store = undefined;
    db = undefined;
  });

  /** A store on the real clock sweeping every `sweepIntervalMs`, and a promise of the next announcement that q has items to claim. */
  async function open(config: ReturnType<typeof resolveQueue>, sweepIntervalMs: number) {
    if (!postgresPresent(target)) throw new Error('unreachable');
    db = await freshDatabaseWithClient(target.url, true);
    const notifier = new InProcessNotifier();
    const ref: QueueRef = { key: 'wake.example.com/q', host: 'wake.example.com', name: 'q', config };
    store = new PostgresStore({ url: db.url, notifier, configFor: (key) => (key === ref.key ? config : undefined), sweepIntervalMs });
    await store.open();
    const opened = Date.now();
    const announced = (): Promise<number> =>
      new Promise((resolve) => {
        const off = notifier.subscribe(claimTopic(ref.key), () => {
          off();
          resolve(Date.now());
        });
      });
    return { store, ref, opened, announced };
  }

  it('a retry delay set on this node is applied when it ends, not at the next periodic sweep (decisions §2.2, §3.3, §6.1)', async function () {
    if (!postgresPresent(target)) this.skip();
    // The periodic sweep would first run 10 s after open: only the wake can apply the retry in time.
    const { store, ref, announced } = await open(resolveQueue({ retryDelaySeconds: 0.5, maxAttempts: 2 }), 10_000);
    const { id } = await store.post(ref, { body: '{}', postedBy: 'p' });
    await store.claim(ref, { worker: 'w' });
    const next = announced();
    await store.error(ref, id, '{"try":1}');
    const errored = Date.now();
    const at = await next;
    expect(at - errored).to.be.within(400, 2500);
    expect((await store.claim(ref, { worker: 'w' }))?.id).to.equal(id);
  });

  it('a lease ending beyond two sweep intervals is seen coming by a periodic sweep and applied when it ends (decisions §3.2, §6.1)', async function () {
    if (!postgresPresent(target)) this.skip();
    // Sweeps every 1 s from open; the lease (5 s, set 0.5 s after open) ends half-way between two
    // of them, and too far off for the claim to wake for it.
    const { store, ref, opened, announced } = await open(resolveQueue({ leaseSeconds: 5, maxAttempts: 2 }), 1000);
    await store.post(ref, { body: '{}', postedBy: 'p' });
    await sleep(Math.max(0, opened + 500 - Date.now()));
    const claimed = await store.claim(ref, { worker: 'lost' });
    const until = claimed!.lease.until;
    const at = await announced();
    expect(at - until).to.be.within(-20, 300);
  });
});
