import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue } from '../../src/engine/config.js';
import { PgNotifier } from '../../src/store/postgres/pg-notifier.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { faultProxy } from '../support/fault-proxy.js';
import { freshDatabase, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * PgNotifier: long polls on one node woken by changes committed on another (decisions §6.1: "a
 * claim held on one node is answered within milliseconds of a matching post on another").
 */

const target = await postgresUnderTest();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/**
 * A node that begins to wait on something wakes its own listeners of it twice within a second of
 * saying so (in case another node changed it before hearing): tests that count wake-ups let that
 * second pass first.
 */
const pastOwnLooks = (): Promise<void> => sleep(1100);

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
    await pastOwnLooks();
    [onA, onB, other] = [0, 0, 0];
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
    await pastOwnLooks();
    onB = 0;
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
    await pastOwnLooks();
    woken.clear();
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

  it('a node whose listening connection stops answering while it sends cuts it, listens again and goes on sending (decisions §6.1: nodes reconnect by themselves)', async () => {
    // C reaches the database through a proxy that can swallow its NOTIFY statements: the
    // connection stays open but that statement is never answered, as when the database's host
    // vanishes or a network drops its packets.
    const server = new URL(db.url);
    const proxy = await faultProxy(`http://${server.hostname}:${server.port}`, /pg_notify/);
    const viaProxy = new URL(urlFor('svcq-notifier-c'));
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = new URL(proxy.url).port;
    const c = new PgNotifier({ url: viaProxy.toString(), answerTimeoutMs: 500, warn: (l) => warnings.push(l) });
    try {
      await c.start();
      let onA = 0;
      a.subscribe('claim h/q', () => onA++);
      await pastOwnLooks();
      await eventually(() => {
        c.notify('claim h/q');
        return onA > 0;
      });
      proxy.hold = true;
      await sleep(30);
      c.notify('claim h/q');
      await sleep(100);
      proxy.hold = false;
      onA = 0;
      // Within a few answer timeouts, C's notifications reach A again.
      await eventually(() => {
        c.notify('claim h/q');
        return onA > 0;
      }, 5000);
      expect(warnings.some((w) => w.includes('did not answer within 0.5 s'))).to.equal(true);
    } finally {
      await c.close();
      proxy.close();
    }
  });

  it('a node that only listens finds out that its connection stopped answering, listens again and hears the others (decisions §6.1: nodes reconnect by themselves)', async () => {
    // Nothing is sent on an idle listening connection, so one that died without closing would go
    // unnoticed until TCP keepalives (hours): a short check finds it. The proxy swallows what C
    // sends while `hold` is on, as a connection to a vanished host does.
    const server = new URL(db.url);
    const proxy = await faultProxy(`http://${server.hostname}:${server.port}`, /SELECT 1/);
    const viaProxy = new URL(urlFor('svcq-notifier-c'));
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = new URL(proxy.url).port;
    const c = new PgNotifier({ url: viaProxy.toString(), answerTimeoutMs: 500, pingMs: 200, warn: (l) => warnings.push(l) });
    try {
      await c.start();
      proxy.hold = true;
      await eventually(() => warnings.some((w) => w.includes('did not answer within 0.5 s')), 5000);
      proxy.hold = false;
      await eventually(() => warnings.some((w) => w.includes('listening for other nodes again')), 5000);
      let onC = 0;
      c.subscribe('claim h/q', () => onC++);
      await pastOwnLooks();
      onC = 0;
      await eventually(() => {
        a.notify('claim h/q');
        return onC > 0;
      }, 5000);
    } finally {
      await c.close();
      proxy.close();
    }
  });

  it('a topic no other node waits on is not sent once the others have said what they wait on; one they wait on is (decisions §6.1: a NOTIFY is a commit)', async () => {
    // What arrives on the wire: a plain listener of the same channel.
    const spy = new pg.Client({ connectionString: urlFor('svcq-notifier-spy') });
    await spy.connect();
    const seen: string[] = [];
    spy.on('notification', (msg) => seen.push(msg.payload ?? ''));
    await spy.query('LISTEN svcq');
    try {
      // Past the second after its start in which a node sends everything (the answers to its question).
      await sleep(1200);
      seen.length = 0;
      a.notify('claim h/nobody');
      a.notify('item h/nobody 0123456789abcdef');
      await sleep(200);
      expect(seen.filter((p) => p.includes('h/nobody'))).to.deep.equal([]);
      // B waits on a queue: it says so, A hears it and from then on tells B.
      let onB = 0;
      b.subscribe('claim h/q', () => onB++);
      await eventually(() => seen.some((p) => p.endsWith(' want claim h/q')));
      // Once A has heard it (a moment after the spy did: notified until then), A's notify goes on
      // the wire. B's own look after it said so may count first: what is checked is the wire.
      await eventually(() => {
        a.notify('claim h/q');
        return seen.some((p) => p.endsWith(' claim h/q') && !p.includes('want'));
      }, 5000);
      await eventually(() => onB >= 1, 1000);
    } finally {
      await spy.end();
    }
  });

  it('a node that begins to wait looks again shortly after it says so: a change another node made before hearing it is not missed (decisions §6.1)', async () => {
    await sleep(1200);
    let onB = 0;
    b.subscribe('claim h/late', () => onB++);
    // A has not heard B yet: nothing is sent, and B's own look a moment later finds the change.
    a.notify('claim h/late');
    const started = Date.now();
    await eventually(() => onB >= 1, 2000);
    expect(Date.now() - started).to.be.within(150, 1500);
  });

  it('a node that starts asks the others what they wait on and hears it within a second (decisions §6.1)', async () => {
    await sleep(1200);
    let onB = 0;
    b.subscribe('claim h/q', () => onB++);
    // Past B's looks again, so that only a notification from the new node can wake it.
    await sleep(1200);
    const c = new PgNotifier({ url: urlFor('svcq-notifier-c'), warn: (l) => warnings.push(l) });
    await c.start();
    try {
      await sleep(1200);
      const before = onB;
      c.notify('claim h/q');
      await eventually(() => onB > before, 1000);
    } finally {
      await c.close();
    }
  });

  /** Runs `body` with a store on each node (A's and B's notifiers) and queue `name`, closing both after. */
  async function onTwoNodes(name: string, body: (nodeA: PostgresStore, nodeB: PostgresStore, q: QueueRef) => Promise<void>): Promise<void> {
    const config = resolveQueue({ leaseSeconds: 30 });
    const q: QueueRef = { key: `h.example.com/${name}`, host: 'h.example.com', name, config };
    const nodeA = new PostgresStore({ url: db.url, notifier: a, configFor: () => config });
    const nodeB = new PostgresStore({ url: db.url, notifier: b, configFor: () => config });
    await nodeA.open();
    await nodeB.open();
    try {
      await body(nodeA, nodeB, q);
    } finally {
      await nodeA.close();
      await nodeB.close();
    }
  }

  it('a claim held on one node is answered within milliseconds of a post on another (decisions §3.3 wait, §6.1)', async () => {
    await onTwoNodes('jobs', async (nodeA, nodeB, q) => {
      const waits = new LongPolls(nodeB, b);
      const waiting = waits.claim(q, { worker: 'on-b', waitMs: 10_000 });
      await sleep(50);
      const posted = Date.now();
      const { id } = await nodeA.post(q, { body: '{"from":"a"}', postedBy: 'p' });
      const claimed = await waiting;
      expect(claimed).to.deep.include({ id, item: '{"from":"a"}', attempts: 1 });
      // B's store never saw the post: only A's NOTIFY, through the database, woke the claim.
      expect(Date.now() - posted).to.be.below(500);
    });
  });

  it('past the first second, when nodes send only what others wait on, a claim that begins to wait on one node is still answered within milliseconds of a post on another (decisions §3.3 wait, §6.1)', async () => {
    await onTwoNodes('later', async (nodeA, nodeB, q) => {
      await sleep(1200);
      const waits = new LongPolls(nodeB, b);
      for (let round = 0; round < 3; round++) {
        const waiting = waits.claim(q, { worker: 'on-b', waitMs: 10_000 });
        await sleep(50);
        const posted = Date.now();
        const { id } = await nodeA.post(q, { body: `{"round":${round}}`, postedBy: 'p' });
        expect((await waiting)?.id).to.equal(id);
        // From the second round on, B still says it waits and looks again by itself only at the
        // end of the 10 s wait: only A's notification answers it this soon.
        expect(Date.now() - posted).to.be.below(400);
      }
    });
  });
});
