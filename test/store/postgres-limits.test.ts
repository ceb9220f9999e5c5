import { expect } from 'chai';
import pg from 'pg';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import type { ClaimHold } from '../../src/engine/limits.js';
import { PgNotifier } from '../../src/store/postgres/pg-notifier.js';
import { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { Claimed, QueueRef } from '../../src/store/store.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { FakeClock, freshDatabaseWithClient, postgresPresent, postgresUnderTest } from './support/stores.js';

/**
 * Flow control on the PostgreSQL store (decisions §8.5): limits checked under the queue's limiter
 * row so that several nodes claiming at once never exceed them, groups fairness from the table of
 * groups, held reasons, and held claims woken on every node when a lease ends.
 */

const target = await postgresUnderTest();

function refOf(name: string, def: Parameters<typeof resolveQueue>[0]): QueueRef {
  return { key: `limits.example.com/${name}`, host: 'limits.example.com', name, config: resolveQueue(def) };
}

describe('PostgreSQL store: flow control (decisions §8.5)', function () {
  this.timeout(60_000);
  let db: { url: string; admin: pg.Client; drop: () => Promise<void> };
  let clock: FakeClock;
  let store: PostgresStore;
  const configs = new Map<string, QueueConfig>();
  /** Items posted by `post` so far in the test: each item's body is { i: its number }. */
  let posted = 0;
  const open = async (now: () => number = clock.now): Promise<PostgresStore> => {
    const s = new PostgresStore({ url: db.url, now, configFor: (key) => configs.get(key), sweepIntervalMs: 0 });
    await s.open();
    return s;
  };
  const use = (ref: QueueRef): QueueRef => {
    configs.set(ref.key, ref.config);
    return ref;
  };
  const post = (ref: QueueRef, n: number, group?: (i: number) => string | undefined, priority?: (i: number) => number) =>
    store.postMany(
      ref,
      Array.from({ length: n }, (_, i) => ({ body: JSON.stringify({ i: posted++ }), postedBy: 'p', options: { group: group?.(i), priority: priority?.(i) } })),
    );
  const num = (c: Claimed | null): number => (JSON.parse(c!.item) as { i: number }).i;
  /** A client of its own in a transaction holding the queue's limiter row, as another node's claim under way does (the caller rolls back and ends it). */
  const holdingRow = async (ref: QueueRef): Promise<pg.Client> => {
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT 1 FROM svcq_limiters WHERE queue = $1 FOR UPDATE', [ref.key]);
    } catch (err) {
      await other.end();
      throw err;
    }
    return other;
  };

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabaseWithClient(target.url, true);
      clock = new FakeClock();
      configs.clear();
      posted = 0;
      store = await open();
    });
    afterEach(async () => {
      await store.close();
      await db.admin.end();
      await db.drop();
    });
  }

  it('maxActive: a claim leases at most maxActive less what is leased, and says maxActive when it held back (decisions §8.5)', async () => {
    const q = use(refOf('max', { maxActive: 3 }));
    await post(q, 10);
    const held: ClaimHold = {};
    const first = await store.claimMany(q, { worker: 'w', held }, 2);
    expect(first).to.have.length(2);
    expect(held).to.deep.equal({});
    const second = await store.claimMany(q, { worker: 'w', held }, 5);
    expect(second).to.have.length(1);
    expect(held.reason).to.equal('maxActive');
    const none: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held: none })).to.equal(null);
    expect(none.reason).to.equal('maxActive');
    await store.result(q, first[0]!.id, '{}');
    expect(await store.claimMany(q, { worker: 'w' }, 5)).to.have.length(1);
  });

  it('maxActive: a claim that found nothing to claim leaves held untouched (decisions §8.5)', async () => {
    const q = use(refOf('empty', { maxActive: 1 }));
    await post(q, 1);
    expect(await store.claim(q, { worker: 'w' })).to.not.equal(null);
    const held: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held })).to.equal(null);
    expect(held).to.deep.equal({});
  });

  it('rateLimit: lease k may happen only when lease k − max is a window old; retryAt is that time (decisions §8.5)', async () => {
    const q = use(refOf('rate', { rateLimit: { max: 3, perSeconds: 10 } }));
    await post(q, 10);
    const t0 = clock.now();
    expect(await store.claimMany(q, { worker: 'w' }, 2)).to.have.length(2);
    clock.advance(4000);
    const held: ClaimHold = {};
    expect(await store.claimMany(q, { worker: 'w', held }, 5)).to.have.length(1);
    expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 10_000 });
    clock.advance(5999);
    const again: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held: again })).to.equal(null);
    expect(again).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 10_000 });
    clock.advance(1);
    expect(await store.claimMany(q, { worker: 'w' }, 5)).to.have.length(2);
    const third: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held: third })).to.equal(null);
    expect(third).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 4000 + 10_000 });
  });

  it('rateLimit: the window survives a restart, kept in the database (decisions §8.5)', async () => {
    const q = use(refOf('rate-restart', { rateLimit: { max: 2, perSeconds: 60 } }));
    await post(q, 5);
    expect(await store.claimMany(q, { worker: 'w' }, 5)).to.have.length(2);
    await store.close();
    store = await open();
    const held: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held })).to.equal(null);
    expect(held.reason).to.equal('rateLimit');
  });

  it('rateLimit: a node whose claim went out ahead of its lock finds the window resized by a node on an older definition, and counts it at its own size (decisions §8.5, §2.4, §6.1)', async () => {
    const q = use(refOf('rate-resized', { rateLimit: { max: 3, perSeconds: 60 } }));
    await post(q, 10);
    // The second claim of this node sends its lock with its claim: the row is known, nothing is due.
    expect(await store.claim(q, { worker: 'a' })).to.not.equal(null);
    expect(await store.claim(q, { worker: 'a' })).to.not.equal(null);
    const other = await open();
    try {
      // A node that has not seen the change yet keeps the two most recent leases in a window of 2: full.
      const older = refOf('rate-resized', { rateLimit: { max: 2, perSeconds: 60 } });
      const full: ClaimHold = {};
      expect(await other.claim(older, { worker: 'b', held: full })).to.equal(null);
      expect(full.reason).to.equal('rateLimit');
      // Back at 3, the window holds one more lease, and then none.
      expect(await store.claimMany(q, { worker: 'a' }, 5)).to.have.length(1);
      const held: ClaimHold = {};
      expect(await store.claim(q, { worker: 'a', held })).to.equal(null);
      expect(held.reason).to.equal('rateLimit');
    } finally {
      await other.close();
    }
  });

  it('paused: a paused queue with limits holds claims with reason paused (decisions §8.4, §8.5)', async () => {
    for (const q of [use(refOf('paused', { maxActive: 2 })), use(refOf('paused-fair', { fairness: 'groups' }))]) {
      await post(q, 2, () => 'a');
      await store.setPaused(q, true);
      const held: ClaimHold = {};
      expect(await store.claim(q, { worker: 'w', held })).to.equal(null);
      expect(held.reason, q.name).to.equal('paused');
    }
  });

  it('paused: a claim on a paused queue without limits says paused too, plain or with criteria; one that is not held back leaves held untouched (decisions §8.4, §8.5)', async () => {
    const q = use(refOf('paused-plain', {}));
    await post(q, 1);
    await store.setPaused(q, true);
    const plain: ClaimHold = {};
    const matching: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held: plain })).to.equal(null);
    expect(await store.claim(q, { worker: 'w', criteria: { i: 0 }, held: matching })).to.equal(null);
    expect(plain.reason).to.equal('paused');
    expect(matching.reason).to.equal('paused');
    await store.setPaused(q, false);
    const free: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held: free })).to.not.equal(null);
    expect(await store.claim(q, { worker: 'w', held: free })).to.equal(null);
    expect(free).to.deep.equal({});
  });

  it('groupMaxActive: each group leases at most groupMaxActive; a saturated group is passed over, the claim says groupMaxActive (decisions §8.5)', async () => {
    const q = use(refOf('gmax', { groupMaxActive: 1 }));
    // a a a b b, then items without a group
    await post(q, 5, (i) => (i < 3 ? 'a' : 'b'));
    await post(q, 2);
    const got = await store.claimMany(q, { worker: 'w' }, 10);
    expect(got.map(num)).to.deep.equal([0, 3, 5]);
    const held: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held })).to.equal(null);
    expect(held.reason).to.equal('groupMaxActive');
    await store.result(q, got[0]!.id, '{}');
    const next = await store.claim(q, { worker: 'w' });
    expect(num(next)).to.equal(1);
  });

  it('groups fairness: claims take turns among groups, least recently served first, priority first; a multi-claim takes one item per turn (decisions §8.5)', async () => {
    const q = use(refOf('fair', { fairness: 'groups' }));
    // Group a posts 6 first, then b 2, then c 2: FIFO would give a's six first.
    await post(q, 6, () => 'a');
    await post(q, 2, () => 'b');
    await post(q, 2, () => 'c');
    const order: string[] = [];
    const names = (i: number): string => (i < 6 ? 'a' : i < 8 ? 'b' : 'c');
    const first = await store.claimMany(q, { worker: 'w' }, 4);
    for (const c of first) order.push(names(num(c)));
    expect(order).to.deep.equal(['a', 'b', 'c', 'a']);
    // A group posted later, never served, comes before every served one.
    await store.postMany(q, [{ body: JSON.stringify({ i: 100 }), postedBy: 'p', options: { group: 'd' } }]);
    const next = await store.claim(q, { worker: 'w' });
    expect(num(next)).to.equal(100);
    // Then b (served at turn 2), c (turn 3), a (turn 4).
    const rest = await store.claimMany(q, { worker: 'w' }, 3);
    expect(rest.map((c) => names(num(c)))).to.deep.equal(['b', 'c', 'a']);
    // A higher priority goes first, whatever the turns.
    await store.postMany(q, [{ body: JSON.stringify({ i: 200 }), postedBy: 'p', options: { group: 'a', priority: 5 } }]);
    const top = await store.claim(q, { worker: 'w' });
    expect(num(top)).to.equal(200);
  });

  it('groups fairness: claims made in the same turn share one transaction and take the turns in the order they were made (decisions §8.5, §6)', async () => {
    const q = use(refOf('fair-fold', { fairness: 'groups', maxActive: 3 }));
    await post(q, 3, () => 'a');
    await post(q, 3, () => 'b');
    const held: ClaimHold = {};
    const [one, two, three] = await Promise.all([store.claimMany(q, { worker: 'w1' }, 2), store.claim(q, { worker: 'w2' }), store.claim(q, { worker: 'w3', held })]);
    expect(one.map(num)).to.deep.equal([0, 3]);
    expect(num(two)).to.equal(1);
    expect(three).to.equal(null);
    expect(held.reason).to.equal('maxActive');
  });

  it('groups fairness alone: a claim of more items than its one statement takes goes on past it, never to an item posted after it in the same turn, nor to one it took already (decisions §8.5, §6)', async () => {
    const q = use(refOf('fair-rest', { fairness: 'groups' }));
    await post(q, 2, () => 'a');
    // One transaction: the claim of three (the statement takes one item of a, the loop the next
    // of a), then a post to a: the post's item comes after the claim, which does not take it.
    const [many, posted] = await Promise.all([
      store.claimMany(q, { worker: 'w1' }, 3),
      store.postMany(q, [{ body: JSON.stringify({ i: 50 }), postedBy: 'p', options: { group: 'a' } }]),
    ]);
    expect(many.map(num)).to.deep.equal([0, 1]);
    expect(posted).to.have.length(1);
    expect(num(await store.claim(q, { worker: 'w2' }))).to.equal(50);
  });

  it('groups fairness alone: a claim made while another claim of the queue is under way waits for it and takes the next item, rather than find the group passed over because the other holds its first item (decisions §8.5, §6.1)', async () => {
    const q = use(refOf('fair-one', { fairness: 'groups' }));
    await post(q, 3, () => 'only');
    expect(num(await store.claim(q, { worker: 'w0' }))).to.equal(0);
    // Another node's claim under way: it holds the queue's limiter row and the group's first item.
    const other = await holdingRow(q);
    try {
      await other.query(`SELECT 1 FROM svcq_items WHERE queue = $1 AND status = 'pending' ORDER BY ord LIMIT 1 FOR UPDATE`, [q.key]);
      let answered = false;
      const claim = store.claim(q, { worker: 'w1' }).finally(() => (answered = true));
      await new Promise((r) => setTimeout(r, 200));
      expect(answered, 'answered while the other claim was under way').to.equal(false);
      // It ends without taking the item: this claim gets it.
      await other.query('ROLLBACK');
      expect(num(await claim)).to.equal(1);
    } finally {
      await other.end();
    }
  });

  it('a claim whose limiter row a transaction of the same node waits for goes in the transaction after it, not beside the calls of the next one: a post to another queue is not held behind the row (decisions §8.5, §6)', async () => {
    const q = use(refOf('fair-held', { fairness: 'groups' }));
    const p = use(refOf('plain', {}));
    await post(q, 3, () => 'only');
    // The first claim makes the queue's limiter row.
    expect(num(await store.claim(q, { worker: 'w' }))).to.equal(0);
    // Another node's claim under way holds it.
    const other = await holdingRow(q);
    try {
      // This node's first transaction waits for the row; the claim after it, and a post, come next.
      const first = store.claim(q, { worker: 'w0' });
      // Its transaction starts in the next turn of the event loop.
      await new Promise((r) => setImmediate(r));
      const second = store.claim(q, { worker: 'w1' });
      const posting = store.post(p, { body: '{}', postedBy: 'p' });
      const outcome = await Promise.race([posting.then(() => 'posted'), new Promise((r) => setTimeout(() => r('held behind the row'), 10_000))]);
      expect(outcome).to.equal('posted');
      await other.query('ROLLBACK');
      expect(num(await first)).to.equal(1);
      expect(num(await second)).to.equal(2);
    } finally {
      await other.end();
    }
  });

  it('groups fairness: the turns survive a restart (decisions §8.5)', async () => {
    const q = use(refOf('fair-restart', { fairness: 'groups' }));
    await post(q, 3, () => 'a');
    await post(q, 3, () => 'b');
    const a = await store.claim(q, { worker: 'w' });
    expect(num(a)).to.equal(0);
    await store.close();
    // A node that starts afresh (a new definition object too) rebuilds the heads and keeps the turns.
    configs.set(q.key, resolveQueue({ fairness: 'groups' }));
    store = await open();
    const q2 = { ...q, config: configs.get(q.key)! };
    const b = await store.claim(q2, { worker: 'w' });
    expect(num(b)).to.equal(3);
  });

  it('groups fairness: the turns are the database\'s, so claims made on two nodes in turn go round the groups as on one (decisions §8.5, §6.1)', async () => {
    const q = use(refOf('fair-nodes', { fairness: 'groups' }));
    await post(q, 3, () => 'a');
    await post(q, 3, () => 'b');
    await post(q, 3, () => 'c');
    const other = await open();
    try {
      const order: string[] = [];
      for (let k = 0; k < 9; k++) {
        const c = await (k % 2 === 0 ? store : other).claim(q, { worker: 'w' });
        order.push('abc'[Math.floor(num(c) / 3)]!);
      }
      expect(order.join('')).to.equal('abcabcabc');
    } finally {
      await other.close();
    }
  });

  it('groups fairness with criteria: a bounded look takes the first matching item in the order of the turns (decisions §8.5)', async () => {
    const q = use(refOf('fair-criteria', { fairness: 'groups' }));
    await store.postMany(q, [
      { body: JSON.stringify({ i: 0, kind: 'x' }), postedBy: 'p', options: { group: 'a' } },
      { body: JSON.stringify({ i: 1, kind: 'y' }), postedBy: 'p', options: { group: 'a' } },
      { body: JSON.stringify({ i: 2, kind: 'y' }), postedBy: 'p', options: { group: 'b' } },
    ]);
    const got = await store.claimMany(q, { worker: 'w', criteria: { kind: 'y' } }, 2);
    expect(got.map(num)).to.deep.equal([1, 2]);
  });

  it('groups with criteria: among the groups it looks at, a claim takes the highest priority first, then with fairness the least recently served group, without it the first matching item in claim order (decisions §8.5)', async () => {
    const body = (i: number, kind: string): string => JSON.stringify({ i, kind });
    const fair = use(refOf('criteria-priority', { fairness: 'groups' }));
    // a: a non-matching item of priority 5, then a matching one of priority 0; b: a matching one of priority 1.
    await store.postMany(fair, [
      { body: body(0, 'x'), postedBy: 'p', options: { group: 'a', priority: 5 } },
      { body: body(1, 'y'), postedBy: 'p', options: { group: 'a' } },
      { body: body(2, 'y'), postedBy: 'p', options: { group: 'b', priority: 1 } },
    ]);
    expect(num(await store.claim(fair, { worker: 'w', criteria: { kind: 'y' } }))).to.equal(2);
    const fifo = use(refOf('criteria-order', { groupMaxActive: 2 }));
    // a holds the first item, which does not match; b's matching item comes before a's.
    await store.postMany(fifo, [
      { body: body(3, 'x'), postedBy: 'p', options: { group: 'a' } },
      { body: body(4, 'y'), postedBy: 'p', options: { group: 'b' } },
      { body: body(5, 'y'), postedBy: 'p', options: { group: 'a' } },
    ]);
    expect(num(await store.claim(fifo, { worker: 'w', criteria: { kind: 'y' } }))).to.equal(4);
  });

  it('groupMaxActive: a group whose last claimable item a claim with criteria took does not hold the next claim back (decisions §8.5)', async () => {
    const q = use(refOf('gmax-criteria', { groupMaxActive: 1 }));
    await store.postMany(q, [{ body: JSON.stringify({ i: 0, kind: 'a' }), postedBy: 'p' }]);
    expect(num(await store.claim(q, { worker: 'w', criteria: { kind: 'a' } }))).to.equal(0);
    const held: ClaimHold = {};
    expect(await store.claim(q, { worker: 'w', held })).to.equal(null);
    expect(held).to.deep.equal({});
  });

  it('paused: a claim with criteria on a paused queue by groups leases nothing and says paused, also folded with the pause (decisions §8.4, §8.5)', async () => {
    for (const [name, def] of [['paused-gmax', { groupMaxActive: 1 }], ['paused-fair', { fairness: 'groups' as const }]] as const) {
      const q = use(refOf(name, def));
      await post(q, 2, () => 'g');
      const held: ClaimHold = {};
      const [, got] = await Promise.all([store.setPaused(q, true), store.claim(q, { worker: 'w', criteria: {}, held })]);
      expect(got).to.equal(null);
      expect(held.reason).to.equal('paused');
      const later: ClaimHold = {};
      expect(await store.claim(q, { worker: 'w', criteria: {}, held: later })).to.equal(null);
      expect(later.reason).to.equal('paused');
    }
  });

  it('groups fairness: items posted while the queue had no groups take their turns once the definition is back, the same rules object included; turns are stamped only with fairness (decisions §8.5, §2.4)', async () => {
    const fairRules = resolveQueue({ fairness: 'groups' });
    const plainRules = resolveQueue({});
    const gmaxRules = resolveQueue({ groupMaxActive: 5 });
    const q = use({ ...refOf('fair-back', {}), config: fairRules });
    const as = (config: QueueConfig): QueueRef => use({ ...q, config });
    await post(q, 1, () => 'b');
    expect(num(await store.claim(q, { worker: 'w' }))).to.equal(0);
    await post(q, 1, () => 'b');
    // Posted without groups: no wake; c was never served, so it comes before b once fairness is back.
    await post(as(plainRules), 1, () => 'c');
    expect(num(await store.claim(as(fairRules), { worker: 'w' }))).to.equal(2);
    // Served under groupMaxActive alone (in claim order: b, then d), d is still never served for
    // the turns, while b was served under fairness: d comes before b.
    await post(as(gmaxRules), 2, () => 'd');
    expect((await store.claimMany(as(gmaxRules), { worker: 'w' }, 2)).map(num)).to.deep.equal([1, 3]);
    await post(as(gmaxRules), 1, () => 'b');
    expect(num(await store.claim(as(fairRules), { worker: 'w' }))).to.equal(4);
  });

  it('groupsWaiting: the groups holding a claimable item, null for a queue without groups (decisions §8.5)', async () => {
    const q = use(refOf('waiting', { fairness: 'groups' }));
    const plain = use(refOf('plain', {}));
    await post(q, 6, (i) => (i % 3 === 0 ? undefined : `g${i % 3}`));
    const view = () => store.overview(q, { oldest: 0, leases: 0 });
    expect((await view()).groupsWaiting).to.equal(3);
    await store.claimMany(q, { worker: 'w' }, 3);
    expect((await view()).groupsWaiting).to.equal(3);
    await store.claimMany(q, { worker: 'w' }, 3);
    expect((await view()).groupsWaiting).to.equal(0);
    expect((await store.overview(plain, { oldest: 0, leases: 0 })).groupsWaiting).to.equal(null);
  });

  it('a lease ending in a queue with maxActive wakes a claim held on another node (decisions §8.5, §6.1)', async () => {
    const q = use(refOf('wake', { maxActive: 1, leaseSeconds: 600 }));
    await post(q, 2);
    const na = new PgNotifier({ url: db.url });
    const nb = new PgNotifier({ url: db.url });
    await Promise.all([na.start(), nb.start()]);
    const a = new PostgresStore({ url: db.url, now: clock.now, notifier: na, sweepIntervalMs: 0 });
    const b = new PostgresStore({ url: db.url, now: clock.now, notifier: nb, sweepIntervalMs: 0 });
    await Promise.all([a.open(), b.open()]);
    try {
      const first = await a.claim(q, { worker: 'w' });
      expect(first).to.not.equal(null);
      const polls = new LongPolls(b, nb);
      const started = Date.now();
      const waiting = polls.claim(q, { worker: 'w2', waitMs: 10_000 });
      // Let the held claim look once and wait, then end the lease on the other node.
      await new Promise((r) => setTimeout(r, 1500));
      await a.result(q, first!.id, '{}');
      const got = await waiting;
      expect(got).to.not.equal(null);
      expect(Date.now() - started).to.be.below(5000);
    } finally {
      await a.close();
      await b.close();
      await na.close();
      await nb.close();
    }
  });

  it('three nodes claiming as fast as they can never exceed maxActive, groupMaxActive or the rate window, and every item finishes (decisions §8.5, §6.1)', async function () {
    this.timeout(120_000);
    const windowMs = 1000;
    const max = 25;
    const q = use(refOf('nodes', { maxActive: 5, groupMaxActive: 1, rateLimit: { max, perSeconds: windowMs / 1000 }, leaseSeconds: 60 }));
    const total = 120;
    await post(q, total, (i) => `g${i % 8}`);
    const nodes = await Promise.all([0, 1, 2].map(() => open(Date.now)));
    try {
      let done = 0;
      const worker = async (s: PostgresStore, w: number): Promise<void> => {
        while (done < total) {
          const got = await s.claimMany(q, { worker: `w${w}` }, 2);
          if (got.length === 0) {
            await new Promise((r) => setTimeout(r, 2));
            continue;
          }
          await Promise.all(
            got.map(async (c) => {
              await new Promise((r) => setTimeout(r, Math.random() * 10));
              const out = await s.result(q, c.id, '{}');
              if (out?.accepted) done++;
            }),
          );
        }
      };
      await Promise.all(nodes.flatMap((s, n) => [0, 1, 2, 3].map((w) => worker(s, n * 4 + w))));
    } finally {
      await Promise.all(nodes.map((s) => s.close()));
    }
    const { rows } = await db.admin.query<{ ts: string; id: string; event: string }>(`SELECT ts, id, event FROM svcq_events WHERE queue = 'nodes' AND event IN ('claimed', 'finished') ORDER BY ts, (event = 'claimed'), seq`);
    const { rows: items } = await db.admin.query<{ id: string; grp: string; status: string }>(`SELECT id, grp, status FROM svcq_items WHERE queue = $1`, [q.key]);
    const groupOf = new Map(items.map((r) => [r.id, r.grp]));
    expect(items.filter((r) => r.status === 'finished')).to.have.length(total);
    let leased = 0;
    let most = 0;
    const perGroup = new Map<string, number>();
    const claims: number[] = [];
    for (const r of rows) {
      const g = groupOf.get(r.id)!;
      if (r.event === 'claimed') {
        leased++;
        perGroup.set(g, (perGroup.get(g) ?? 0) + 1);
        expect(perGroup.get(g), `group ${g} at ${r.ts}`).to.be.at.most(1);
        claims.push(Number(r.ts));
      } else {
        leased--;
        perGroup.set(g, perGroup.get(g)! - 1);
      }
      most = Math.max(most, leased);
      expect(leased, `leased at ${r.ts}`).to.be.at.most(5);
    }
    expect(claims).to.have.length(total);
    expect(most).to.equal(5);
    claims.sort((x, y) => x - y);
    for (let k = max; k < claims.length; k++) expect(claims[k]! - claims[k - max]!, `leases ${k - max} and ${k}`).to.be.at.least(windowMs);
  });

  it('groups fairness alone: three nodes claiming at once (posts folded in meanwhile) take every item once, go round the groups (none served twice ahead of a waiting group by more than the claims in flight), and lose no group (decisions §8.5, §6.1)', async function () {
    this.timeout(120_000);
    const q = use(refOf('fairnodes', { fairness: 'groups', leaseSeconds: 60 }));
    const groups = 12;
    const first = 240;
    const later = 120;
    await post(q, first, (i) => `g${i % groups}`);
    const nodes = await Promise.all([0, 1, 2].map(() => open(Date.now)));
    const inFlight = 3 * 3;
    try {
      let claimed = 0;
      // Items posted while the claims run wake their groups (folded by whichever claim comes first).
      const posting = (async () => {
        for (let k = 0; k < later / 12; k++) {
          await nodes[k % 3]!.postMany(q, Array.from({ length: 12 }, (_, i) => ({ body: JSON.stringify({ i: posted++ }), postedBy: 'p', options: { group: `g${(k + i) % groups}` } })));
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const worker = async (s: PostgresStore, w: number): Promise<void> => {
        let empty = 0;
        while (claimed < first + later && empty < 200) {
          const got = await s.claim(q, { worker: `w${w}` });
          if (!got) {
            empty++;
            await new Promise((r) => setTimeout(r, 2));
            continue;
          }
          claimed++;
          await s.result(q, got.id, '{}');
        }
      };
      await Promise.all([posting, ...nodes.flatMap((s, n) => [0, 1, 2].map((w) => worker(s, n * 3 + w)))]);
    } finally {
      await Promise.all(nodes.map((s) => s.close()));
    }
    const { rows: items } = await db.admin.query<{ id: string; grp: string; status: string }>('SELECT id, grp, status FROM svcq_items WHERE queue = $1', [q.key]);
    expect(items.filter((r) => r.status === 'finished'), 'finished items').to.have.length(first + later);
    const { rows } = await db.admin.query<{ id: string }>(`SELECT id FROM svcq_events WHERE queue = 'fairnodes' AND event = 'claimed' ORDER BY ts, seq`);
    expect(new Set(rows.map((r) => r.id)).size, 'each item claimed once').to.equal(first + later);
    // While every group holds items (the first rounds, before the later posts run out), after
    // n claims no group has more than n / groups + 1 turns, give or take the claims in flight.
    const groupOf = new Map(items.map((r) => [r.id, r.grp]));
    const turns = new Map<string, number>();
    for (let n = 0; n < first; n++) {
      const g = groupOf.get(rows[n]!.id)!;
      turns.set(g, (turns.get(g) ?? 0) + 1);
      expect(turns.get(g)!, `turns of ${g} after ${n + 1} claims`).to.be.at.most(Math.ceil((n + 1 + inFlight) / groups) + 1);
    }
  });
});
