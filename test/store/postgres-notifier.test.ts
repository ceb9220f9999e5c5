import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PgNotifier } from '../../src/store/postgres/pg-notifier.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { freshDatabase, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * PgNotifier: long polls on one node woken by changes committed on another (decisions §6.1: "a
 * claim held on one node is answered within milliseconds of a matching post on another").
 */

const target = await postgresUnderTest();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves when `check` holds, polling every few milliseconds, or fails after `ms`. */
async function eventually(check: () => boolean, ms = 3000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('the condition did not hold in time');
    await sleep(5);
  }
}

describe('PgNotifier: waking listeners of other nodes (decisions §6.1)', function () {
  this.timeout(30_000);
  let db: { url: string; drop: () => Promise<void> };
  let a: PgNotifier;
  let b: PgNotifier;
  let warnings: string[];
  const urlFor = (name: string): string => {
    const u = new URL(db.url);
    u.searchParams.set('application_name', name);
    return u.toString();
  };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabase(target.url);
      warnings = [];
      a = new PgNotifier({ url: urlFor('svcq-notifier-a'), warn: (l) => warnings.push(l) });
      b = new PgNotifier({ url: urlFor('svcq-notifier-b'), warn: (l) => warnings.push(l) });
      await Promise.all([a.start(), b.start()]);
    });
    afterEach(async () => {
      await a.close();
      await b.close();
      await db.drop();
    });
  }

  it('a topic notified on one node wakes its own listeners at once (and not again by its own NOTIFY) and the listeners of the other node', async () => {
    let onA = 0;
    let onB = 0;
    let other = 0;
    a.subscribe('claim h/q', () => onA++);
    b.subscribe('claim h/q', () => onB++);
    b.subscribe('claim h/other', () => other++);
    a.notify('claim h/q');
    await new Promise((resolve) => setImmediate(resolve));
    expect(onA).to.equal(1);
    const started = Date.now();
    await eventually(() => onB === 1);
    expect(Date.now() - started).to.be.below(1000);
    await sleep(100);
    expect([onA, onB, other]).to.deep.equal([1, 1, 0]);
  });

  it('a burst of notifications of one topic is sent at most once per 20 ms, and its last one always arrives', async () => {
    let onB = 0;
    b.subscribe('item h/q 1', () => onB++);
    for (let i = 0; i < 50; i++) a.notify('item h/q 1');
    await sleep(5);
    a.notify('item h/q 1');
    await sleep(200);
    // The first of the burst at once, the rest folded into one sent at the end of the interval.
    expect(onB).to.be.within(1, 3);
    const before = onB;
    await sleep(30);
    a.notify('item h/q 1');
    await eventually(() => onB === before + 1);
  });


  it('thousands of item topics at once reach the other node, each exactly once, packed into a few notifications (decisions §6.1)', async () => {
    const ids = Array.from({ length: 3000 }, (_, i) => `item h/q ${i.toString(16).padStart(16, '0')}`);
    const woken = new Map<string, number>();
    for (const topic of ids) b.subscribe(topic, () => woken.set(topic, (woken.get(topic) ?? 0) + 1));
    // What arrives on the wire: a plain listener of the same channel.
    const spy = new pg.Client({ connectionString: urlFor('svcq-notifier-spy') });
    await spy.connect();
    let messages = 0;
    spy.on('notification', () => messages++);
    await spy.query('LISTEN svcq');
    try {
      for (const topic of ids) a.notify(topic);
      await eventually(() => woken.size === ids.length, 5000);
      await sleep(100);
      expect([...woken.values()].every((n) => n === 1)).to.equal(true);
      // About 31 bytes a topic, at most 7000 bytes a notification.
      expect(messages).to.be.within(1, 20);
    } finally {
      await spy.end();
    }
  });
  it('after its listening connection is killed, a node listens again by itself and wakes its listeners (decisions §6.1: nodes reconnect by themselves)', async () => {
    let onB = 0;
    b.subscribe('claim h/q', () => onB++);
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'svcq-notifier-b' AND datname = current_database()`);
    } finally {
      await admin.end();
    }
    // Once back, B wakes its own listeners (what was sent meanwhile is lost), then hears A again.
    await eventually(() => onB >= 1, 5000);
    const before = onB;
    await eventually(() => {
      a.notify('claim h/q');
      return onB > before;
    }, 5000);
    expect(warnings.some((w) => w.includes('listening for other nodes again'))).to.equal(true);
  });

  it('a claim held on one node is answered within milliseconds of a post on another (decisions §3.3 wait, §6.1)', async () => {
    const config = resolveQueue({ leaseSeconds: 30 });
    const q: QueueRef = { key: 'h.example.com/jobs', host: 'h.example.com', name: 'jobs', config };
    const nodeA = new PostgresStore({ url: db.url, notifier: a, configFor: () => config });
    const nodeB = new PostgresStore({ url: db.url, notifier: b, configFor: () => config });
    await nodeA.open();
    await nodeB.open();
    try {
      const waits = new LongPolls(nodeB, b);
      const waiting = waits.claim(q, { worker: 'on-b', waitMs: 10_000 });
      await sleep(50);
      const posted = Date.now();
      const { id } = await nodeA.post(q, { body: '{"from":"a"}', postedBy: 'p' });
      const claimed = await waiting;
      expect(claimed).to.deep.include({ id, item: '{"from":"a"}', attempts: 1 });
      // B's store never saw the post: only A's NOTIFY, through the database, woke the claim.
      expect(Date.now() - posted).to.be.below(500);
    } finally {
      await nodeA.close();
      await nodeB.close();
    }
  });
});
