import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { horizonOf } from '../../src/store/postgres/pg-event-outbox.js';
import type { QueueRef } from '../../src/store/store.js';
import { TaskEventLog } from '../../src/tools/task-events.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest } from '../store/support/stores.js';
import { cleanupTemp, tempDir } from '../support/server.js';

/**
 * The task history of nodes that share one PostgreSQL database (decisions §5, §6.1: task events
 * live in the database, and the task-history endpoints answer the same on every node): each node
 * keeps its own day-files under its own root, fed from `svcq_events`.
 */

const target = await postgresUnderTest();
const HOST = 'history.example.com';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One node: its store and its history, in its own directory. */
interface Node {
  store: PostgresStore;
  log: TaskEventLog;
  dir: string;
}

describe('task history from PostgreSQL, on every node (decisions §5, §6.1)', function () {
  this.timeout(60_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let admin: pg.Client;
  let clock: FakeClock;
  let nodes: Node[];
  let dirs: string[];
  let warnings: string[];
  const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 2 });
  const ref = (name: string): QueueRef => ({ key: `${HOST}/${name}`, host: HOST, name, config });

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url);
      admin = db.admin;
      clock = new FakeClock();
      nodes = [];
      dirs = [];
      warnings = [];
    });
    afterEach(async () => {
      for (const n of nodes) await stop(n).catch(() => undefined);
      await db.drop();
      for (const dir of dirs) cleanupTemp(dir);
    });
  }

  async function start(dir?: string, options: { eventRetentionMs?: number } = {}): Promise<Node> {
    if (!dir) dirs.push((dir = tempDir('svcq-pg-history-')));
    const store = new PostgresStore({ url: db.url, now: clock.now, warn: (l) => warnings.push(l), eventPollMs: 50, ...options });
    await store.open();
    const log = new TaskEventLog(path.join(dir, 'tasks'));
    await log.start(store);
    const node = { store, log, dir };
    nodes.push(node);
    return node;
  }

  async function stop(node: Node): Promise<void> {
    nodes = nodes.filter((n) => n !== node);
    await node.log.close();
    await node.store.close();
  }

  /** Every line of a node's day-files, in file order. */
  function history(node: Node): string[] {
    const dir = path.join(node.dir, 'tasks');
    return readdirSync(dir)
      .filter((f) => f.startsWith('tasks-'))
      .sort()
      .flatMap((f) => readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean));
  }

  /** The events in the database, as the lines every history must hold, in transaction order. */
  async function expected(): Promise<string[]> {
    const res = await admin.query<{ line: string; worker: string | null }>(
      `SELECT json_build_object('ts', ts, 'host', host, 'queue', queue, 'id', id, 'event', event, 'attempts', attempts, 'status', status)::text AS line, worker
         FROM svcq_events ORDER BY xid, seq`,
    );
    return res.rows.map((r) => {
      // decisions §5's field order: { ts, host, queue, id, event, attempts, worker?, status }.
      const { status, ...e } = JSON.parse(r.line) as Record<string, unknown>;
      return JSON.stringify(r.worker === null ? { ...e, status } : { ...e, worker: r.worker, status });
    });
  }

  /** Waits until every node's history holds exactly the database's events. */
  async function converged(list: Node[]): Promise<string[]> {
    const want = await expected();
    const started = Date.now();
    for (;;) {
      const got = list.map(history);
      if (got.every((lines) => lines.length >= want.length)) {
        for (const lines of got) expect(lines).to.deep.equal(want);
        return want;
      }
      if (Date.now() - started > 10_000) throw new Error(`histories hold ${got.map((g) => g.length).join(', ')} of ${want.length} events`);
      await sleep(20);
    }
  }

  /** A little of everything on one node: posts, a claim, progress, a result, an error, a cancel. */
  async function work(store: PostgresStore, q: QueueRef, tag: string): Promise<void> {
    const posted = await store.postMany(q, [0, 1, 2, 3].map((n) => ({ body: `{"n":${n},"tag":"${tag}"}`, postedBy: 'producer' })));
    const claimed = await store.claimMany(q, { worker: `w-${tag}` }, 3);
    await store.progress(q, claimed[0]!.id, '{"pct":50}');
    await store.result(q, claimed[0]!.id, '{"ok":true}');
    await store.error(q, claimed[1]!.id, '{"why":"x"}');
    await store.cancel(q, posted[3]!.id);
  }

  it('events from changes on either node appear in both nodes’ day-files, in the same order, exactly once (decisions §5, §6.1)', async () => {
    const [a, b] = [await start(), await start()];
    await Promise.all([work(a.store, ref('qa'), 'a'), work(b.store, ref('qb'), 'b'), work(a.store, ref('shared'), 'a2'), work(b.store, ref('shared'), 'b2')]);
    const lines = await converged([a, b]);
    expect(lines.length).to.be.greaterThan(30);
    // decisions §5's field order, as the embedded store writes it: { ts, host, queue, id, event, attempts, worker?, status }.
    for (const line of lines) {
      const e = JSON.parse(line) as object;
      expect(Object.keys(e)).to.deep.equal(['ts', 'host', 'queue', 'id', 'event', 'attempts', ...('worker' in e ? ['worker'] : []), 'status']);
    }
    expect(lines.filter((l) => l.includes('"worker":"w-a"')).length).to.be.greaterThan(0);
    expect(new Set(lines).size, 'no line twice').to.equal(lines.length);
  });

  it('a node restarted keeps its history exactly once: what happened while it was down is added after it, nothing twice (decisions §5)', async () => {
    const a = await start();
    let b = await start();
    await work(a.store, ref('q1'), 'a');
    await work(b.store, ref('q1'), 'b');
    await converged([a, b]);
    const dir = b.dir;
    await stop(b);
    await work(a.store, ref('q2'), 'while-down');
    b = await start(dir);
    await work(b.store, ref('q3'), 'after');
    await work(a.store, ref('q3'), 'after-a');
    const lines = await converged([a, b]);
    expect(lines.some((l) => l.includes('"queue":"q2"'))).to.equal(true);
    expect(new Set(lines).size).to.equal(lines.length);
  });

  it('a node that starts with no history takes every event the database holds (decisions §6.1: the same on every node)', async () => {
    const a = await start();
    await work(a.store, ref('early'), 'a');
    await converged([a]);
    const late = await start();
    await work(late.store, ref('later'), 'late');
    await converged([a, late]);
  });

  it('a node that starts with no history files the events of earlier days under their own days, as a node that saw them live does (decisions §6.1, interface §4.6)', async () => {
    const files = (node: Node): string[] => readdirSync(path.join(node.dir, 'tasks')).filter((f) => f.startsWith('tasks-')).sort();
    const dayFile = (ms: number): string => `tasks-${new Date(ms).toISOString().slice(0, 10)}.log`;
    const day1 = dayFile(clock.now());
    // The first day's events come from a node without a history here (the store alone).
    const writer = new PostgresStore({ url: db.url, now: clock.now, warn: (l) => warnings.push(l) });
    await writer.open();
    try {
      await work(writer, ref('day1'), 'd1');
    } finally {
      await writer.close();
    }
    const a = await start();
    await converged([a]);
    clock.advance(86_400_000);
    await work(a.store, ref('day2'), 'd2');
    await converged([a]);
    expect(files(a)).to.deep.equal([day1, dayFile(clock.now())]);
    // A node added later takes the same events into the same day-files, not all into one.
    const late = await start();
    await converged([a, late]);
    expect(files(late)).to.deep.equal(files(a));
    for (const name of files(a)) {
      expect(readFileSync(path.join(late.dir, 'tasks', name), 'utf8'), name).to.equal(readFileSync(path.join(a.dir, 'tasks', name), 'utf8'));
    }
  });

  it('transactions committing out of their events’ seq order on three nodes at once lose no event and double none (decisions §5, §6.1)', async () => {
    const list = [await start(), await start(), await start()];
    const queues = ['c1', 'c2', 'c3', 'c4'].map(ref);
    await Promise.all(
      list.flatMap((n, i) =>
        Array.from({ length: 60 }, async (_, j) => {
          const q = queues[(i + j) % queues.length]!;
          await n.store.post(q, { body: `{"i":${i},"j":${j}}`, postedBy: 'p' });
          const got = await n.store.claim(q, { worker: `w${i}` });
          if (got) await n.store.result(q, got.id, '{}');
        }),
      ),
    );
    const lines = await converged(list);
    expect(new Set(lines).size).to.equal(lines.length);
    expect(lines.filter((l) => l.includes('"event":"posted"')).length).to.equal(180);
  });

  it('an event written earlier by a transaction that commits later is neither skipped nor reordered: the history waits for it (decisions §5)', async () => {
    const a = await start();
    // Another node's transaction: its event gets its seq now, and commits only later.
    const slow = new pg.Client({ connectionString: db.url });
    await slow.connect();
    try {
      await slow.query('BEGIN');
      await slow.query(`INSERT INTO svcq_events (ts, host, queue, id, event, attempts, status) VALUES ($1, $2, 'slow', '00000000000000aa', 'posted', 0, 'pending')`, [clock.now(), HOST]);
      await work(a.store, ref('fast'), 'fast');
      await sleep(300);
      expect(history(a), 'nothing passes a transaction still open below it').to.deep.equal([]);
      await slow.query('COMMIT');
    } finally {
      await slow.end();
    }
    const lines = await converged([a]);
    expect(lines[0]).to.include('"queue":"slow"');
    expect(lines.length).to.be.greaterThan(1);
  });

  it('an item\'s events are in the order they happened, also when the transaction that changed it last got its id before the one that changed it first (decisions §5)', async () => {
    const [a, b] = [await start(), await start()];
    const q: QueueRef = { key: `${HOST}/order`, host: HOST, name: 'order', config: resolveQueue({ leaseSeconds: 10, maxAttempts: 1 }) };
    const [y] = await a.store.postMany(q, [{ body: '{"n":"y"}', postedBy: 'producer' }]);
    expect((await a.store.claim(q, { worker: 'wa' }))?.id).to.equal(y!.id);
    // B's transaction gets its id with its post, then waits for the lock on y that its error needs;
    // its claim comes after the error. Meanwhile A posts x, in a transaction with a later id.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    let x: string;
    let claimed: string | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM svcq_items WHERE id = $1 FOR UPDATE', [y!.id]);
      const onB = Promise.all([
        b.store.postMany(ref('elsewhere'), [{ body: '{"n":"e"}', postedBy: 'producer' }]),
        b.store.error(q, y!.id, '{"why":"y"}'),
        b.store.claim(q, { worker: 'wb' }),
      ]);
      await sleep(300);
      x = (await a.store.postMany(q, [{ body: '{"n":"x"}', postedBy: 'producer' }]))[0]!.id;
      await holder.query('COMMIT');
      claimed = (await onB)[2]?.id;
    } finally {
      await holder.end();
    }
    expect(claimed, 'B claimed x, posted while its transaction waited').to.equal(x);
    const lines = await converged([a, b]);
    const ofX = lines.filter((l) => l.includes(`"id":"${x}"`)).map((l) => (JSON.parse(l) as { event: string }).event);
    expect(ofX).to.deep.equal(['posted', 'claimed']);
  });

  it('a transaction open in another database of the same server does not hold the history back (decisions §5: events are in the history once acknowledged)', async () => {
    const a = await start();
    // The database the test databases are made on: another database of the same server.
    const other = new pg.Client({ connectionString: (target as { url: string }).url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT pg_current_xact_id()');
      await work(a.store, ref('while-other-open'), 'w');
      const started = Date.now();
      while (!history(a).some((l) => l.includes('"queue":"while-other-open"')) && Date.now() - started < 3000) await sleep(20);
      expect(history(a).some((l) => l.includes('"queue":"while-other-open"')), 'events in the history while the other database has a transaction open').to.equal(true);
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      await other.end();
    }
  });

  it('horizonOf reads 32-bit running ids in the epoch of the next id, across a wrap, and ignores ids given after it', () => {
    const epoch = 5n << 32n;
    expect(horizonOf(epoch + 1000n, [])).to.equal(epoch + 1000n);
    expect(horizonOf(epoch + 1000n, [990, 500, 999])).to.equal(epoch + 500n);
    // An id given after `next` was read is not older than it.
    expect(horizonOf(epoch + 1000n, [1005])).to.equal(epoch + 1000n);
    // Just past a wrap: 4294967290 belongs to the epoch before.
    expect(horizonOf(epoch + 3n, [4294967290, 2])).to.equal(epoch - 6n);
  });

  it('events older than the retention are purged from the database, and stay in every history (decisions §5: the history is never pruned)', async () => {
    const a = await start(undefined, { eventRetentionMs: 86_400_000 });
    await work(a.store, ref('old'), 'old');
    const before = await converged([a]);
    clock.advance(2 * 86_400_000);
    await work(a.store, ref('new'), 'new');
    await sleep(200);
    const purged = await a.store.purgeEvents();
    expect(purged).to.equal(before.length);
    const left = (await admin.query<{ n: number }>('SELECT count(*)::integer AS n FROM svcq_events')).rows[0]!.n;
    const start2 = Date.now();
    while (history(a).length < before.length + left && Date.now() - start2 < 5000) await sleep(20);
    const lines = history(a);
    expect(lines.length).to.equal(before.length + left);
    expect(lines.slice(0, before.length)).to.deep.equal(before);
  });
});
