import { expect } from 'chai';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import type { Criteria } from '../../src/engine/criteria.js';
import type { ClaimHold } from '../../src/engine/limits.js';
import type { PostOptions } from '../../src/engine/rules.js';
import type { QueueRef, Store } from '../../src/store/store.js';
import type { StoreUnderTest } from './support/stores.js';

/** What the conformance suite hands the limits tests: its store, clock and queues. */
export interface LimitsContext {
  /** The store under test as it stands (a new object after a reopen). */
  h: () => StoreUnderTest;
  /** A new queue with these rules (leases of 30 s unless said otherwise). */
  queue: (def?: QueueDefinition) => QueueRef;
  /** The same queue under a new definition: the next request carries it. */
  redefine: (q: QueueRef, def: QueueDefinition) => QueueRef;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * decisions §8.5 (concurrency, rate and fairness) for every store, as flow-semantics states it:
 * limits checked in the claim's own step, `held` saying which limit stopped a claim, the exact
 * rate window, turns among groups, and both kept across a restart. Called inside each store's
 * conformance suite.
 */
export function limitsConformance(ctx: LimitsContext): void {
  const s = (): Store => ctx.h().store;
  const now = (): number => ctx.h().clock.now();
  const advance = (ms: number): void => ctx.h().clock.advance(ms);
  const settle = async (): Promise<void> => {
    await ctx.h().settle?.();
  };
  async function post(q: QueueRef, body: object = {}, options?: PostOptions): Promise<string> {
    return (await s().post(q, { body: JSON.stringify(body), postedBy: 'producer', options })).id;
  }
  /** Posts one item per group named (null: no group), in order. */
  async function postGroups(q: QueueRef, groups: Array<string | null>, options: PostOptions = {}): Promise<string[]> {
    const ids: string[] = [];
    for (const [i, group] of groups.entries()) ids.push(await post(q, { i, group }, group === null ? options : { ...options, group }));
    return ids;
  }
  async function claimId(q: QueueRef, held?: ClaimHold, criteria?: Criteria): Promise<string | null> {
    return (await s().claim(q, { worker: 'w1', criteria, held }))?.id ?? null;
  }
  async function claimIds(q: QueueRef, max: number, held?: ClaimHold, criteria?: Criteria): Promise<string[]> {
    return (await s().claimMany(q, { worker: 'w1', criteria, held }, max)).map((c) => c.id);
  }
  /** Claims one at a time until nothing is claimed, and the ids in the order claimed. */
  async function drain(q: QueueRef, criteria?: Criteria): Promise<string[]> {
    const out: string[] = [];
    for (let id = await claimId(q, undefined, criteria); id !== null; id = await claimId(q, undefined, criteria)) out.push(id);
    return out;
  }
  const groupsWaiting = async (q: QueueRef): Promise<number | null> => (await s().overview(q, { oldest: 0, leases: 0 })).groupsWaiting;

  describe('limits (decisions §8.5)', () => {
    it('maxActive: claims lease at most maxActive items at once; a result, an error, a release, a cancel and a lease end each free a place', async () => {
      const q = ctx.queue({ maxActive: 2, maxAttempts: 5 });
      const ids = await postGroups(q, [null, null, null, null, null, null]);
      expect(await claimId(q)).to.equal(ids[0]);
      expect(await claimId(q)).to.equal(ids[1]);
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'maxActive' });
      await s().progress(q, ids[1]!, '{}');
      expect(await claimId(q)).to.equal(null);
      await s().result(q, ids[0]!, '{}');
      expect(await claimId(q)).to.equal(ids[2]);
      expect(await claimId(q)).to.equal(null);
      await s().error(q, ids[1]!, '{}');
      expect(await claimId(q)).to.equal(ids[1]);
      await s().release(q, ids[1]!, 0);
      expect(await claimId(q)).to.equal(ids[1]);
      await s().cancel(q, ids[2]!);
      expect(await claimId(q)).to.equal(ids[3]);
      expect(await claimId(q)).to.equal(null);
      advance(30_000);
      await settle();
      // Both leases ended: their items are pending again, and two places are free.
      expect(await claimIds(q, 5)).to.deep.equal([ids[1], ids[3]]);
    });

    it('maxActive: a claim of up to max leases only what the limit leaves, and says so; one that got all it asked for leaves held as it was', async () => {
      const q = ctx.queue({ maxActive: 3 });
      const ids = await postGroups(q, [null, null, null, null, null]);
      const untouched: ClaimHold = {};
      expect(await claimIds(q, 2, untouched)).to.deep.equal(ids.slice(0, 2));
      expect(untouched).to.deep.equal({});
      const held: ClaimHold = {};
      expect(await claimIds(q, 5, held)).to.deep.equal([ids[2]]);
      expect(held).to.deep.equal({ reason: 'maxActive' });
      const again: ClaimHold = {};
      expect(await claimIds(q, 5, again)).to.deep.equal([]);
      expect(again).to.deep.equal({ reason: 'maxActive' });
      expect(await s().counts(q)).to.deep.equal({ claimed: 3, pending: 2 });
    });

    it('a claim that finds nothing to take is not held, whatever the limits; a paused queue holds it with reason paused', async () => {
      const q = ctx.queue({ maxActive: 1, rateLimit: { max: 1, perSeconds: 60 }, groupMaxActive: 1 });
      const a = await post(q, { k: 1 });
      expect(await claimId(q)).to.equal(a);
      const none: ClaimHold = {};
      expect(await claimId(q, none)).to.equal(null);
      expect(none).to.deep.equal({});
      await post(q, { k: 1 });
      const criteria: ClaimHold = {};
      expect(await claimId(q, criteria, { k: 2 })).to.equal(null);
      expect(criteria).to.deep.equal({});
      await s().setPaused(q, true);
      const paused: ClaimHold = {};
      expect(await claimId(q, paused)).to.equal(null);
      expect(paused).to.deep.equal({ reason: 'paused' });
      const plain = ctx.queue();
      await s().setPaused(plain, true);
      const many: ClaimHold = {};
      expect(await claimIds(plain, 3, many)).to.deep.equal([]);
      expect(many).to.deep.equal({ reason: 'paused' });
    });

    it('held.reason is the first limit that binds, in the order paused, maxActive, rateLimit, groupMaxActive', async () => {
      let q = ctx.queue({ leaseSeconds: 300, maxActive: 1, rateLimit: { max: 1, perSeconds: 60 }, groupMaxActive: 1 });
      const [a] = await postGroups(q, ['g', 'g', 'g']);
      expect(await claimId(q)).to.equal(a);
      const all: ClaimHold = {};
      expect(await claimId(q, all)).to.equal(null);
      expect(all).to.deep.equal({ reason: 'maxActive' });
      q = ctx.redefine(q, { leaseSeconds: 300, maxActive: 5, rateLimit: { max: 1, perSeconds: 60 }, groupMaxActive: 1 });
      const rate: ClaimHold = {};
      expect(await claimId(q, rate)).to.equal(null);
      expect(rate).to.deep.equal({ reason: 'rateLimit', retryAt: now() + 60_000 });
      advance(60_000);
      const group: ClaimHold = {};
      expect(await claimId(q, group)).to.equal(null);
      expect(group).to.deep.equal({ reason: 'groupMaxActive' });
      const withCriteria: ClaimHold = {};
      expect(await claimId(q, withCriteria, { group: 'g' })).to.equal(null);
      expect(withCriteria).to.deep.equal({ reason: 'groupMaxActive' });
      await s().setPaused(q, true);
      const paused: ClaimHold = {};
      expect(await claimId(q, paused)).to.equal(null);
      expect(paused).to.deep.equal({ reason: 'paused' });
    });

    it('groupMaxActive: at most that many leased items per group (items without a group form one), other groups go on in claim order', async () => {
      const q = ctx.queue({ groupMaxActive: 1 });
      const ids = await postGroups(q, ['g1', 'g1', 'g2', null, null, 'g2']);
      expect(await claimId(q)).to.equal(ids[0]);
      expect(await claimId(q)).to.equal(ids[2]);
      expect(await claimId(q)).to.equal(ids[3]);
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'groupMaxActive' });
      await s().result(q, ids[0]!, '{}');
      await s().cancel(q, ids[3]!);
      expect(await claimIds(q, 5)).to.deep.equal([ids[1], ids[4]]);
      const q2 = ctx.queue({ groupMaxActive: 2 });
      const more = await postGroups(q2, ['a', 'a', 'a', 'b', 'a', 'b', 'b']);
      expect(await claimIds(q2, 10)).to.deep.equal([more[0], more[1], more[3], more[5]]);
    });

    it('groupMaxActive with criteria: a claim takes the oldest matching item of a group below the limit, and is held only by a matching item', async () => {
      const q = ctx.queue({ groupMaxActive: 1 });
      const ids: string[] = [];
      ids.push(await post(q, { k: 1 }, { group: 'g1' }));
      ids.push(await post(q, { k: 1 }, { group: 'g1' }));
      ids.push(await post(q, { k: 2 }, { group: 'g2' }));
      ids.push(await post(q, { k: 1 }, { group: 'g2' }));
      expect(await claimId(q, undefined, { k: 1 })).to.equal(ids[0]);
      expect(await claimId(q, undefined, { k: 1 })).to.equal(ids[3]);
      const held: ClaimHold = {};
      expect(await claimId(q, held, { k: 1 })).to.equal(null);
      expect(held).to.deep.equal({ reason: 'groupMaxActive' });
      const none: ClaimHold = {};
      expect(await claimId(q, none, { k: 3 })).to.equal(null);
      expect(none).to.deep.equal({});
    });

    it('rateLimit: lease k may happen at t only if lease k − max happened at or before t − window, each item of a claim of up to max counting; held.retryAt is when the next may', async () => {
      const q = ctx.queue({ leaseSeconds: 300, rateLimit: { max: 2, perSeconds: 10 } });
      const ids = await postGroups(q, [null, null, null, null, null, null, null, null]);
      const t0 = now();
      expect(await claimId(q)).to.equal(ids[0]);
      advance(4000);
      expect(await claimId(q)).to.equal(ids[1]);
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 10_000 });
      advance(5999);
      const edge: ClaimHold = {};
      expect(await claimId(q, edge)).to.equal(null);
      expect(edge).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 10_000 });
      advance(1);
      expect(await claimId(q)).to.equal(ids[2]);
      const next: ClaimHold = {};
      expect(await claimId(q, next)).to.equal(null);
      expect(next.retryAt).to.equal(t0 + 14_000);
      advance(30_000);
      const many: ClaimHold = {};
      expect(await claimIds(q, 5, many)).to.deep.equal([ids[3], ids[4]]);
      expect(many).to.deep.equal({ reason: 'rateLimit', retryAt: now() + 10_000 });
      // Finished or not, leases count: the window is about leasing, not about what is active.
      await s().result(q, ids[3]!, '{}');
      expect(await claimId(q)).to.equal(null);
    });

    it('rateLimit: claims made at once, with criteria and without, in either order, together lease at most max in the window; the one left out is held with retryAt a window on', async () => {
      for (const criteriaFirst of [false, true]) {
        const q = ctx.queue({ leaseSeconds: 300, rateLimit: { max: 2, perSeconds: 3 } });
        const ids = await postGroups(q, [null, null, null, null]);
        const held: ClaimHold = {};
        const picky = (): Promise<string | null> => claimId(q, held, { i: { gte: 2 } });
        const calls = criteriaFirst ? [picky, () => claimId(q), () => claimId(q)] : [() => claimId(q), () => claimId(q), picky];
        // Made in one turn: the PostgreSQL store runs them in one transaction, the plain claims in one statement.
        const got = await Promise.all(calls.map((call) => call()));
        expect(got.filter((id) => id !== null), `criteria first: ${criteriaFirst}`).to.have.length(2);
        expect(new Set(got.filter((id) => id !== null)).size).to.equal(2);
        for (const id of got) if (id !== null) expect(ids).to.include(id);
        expect(await claimId(q)).to.equal(null);
        if (got[criteriaFirst ? 0 : 2] === null) expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: now() + 3000 });
      }
    });

    it('rateLimit follows a definition change: a larger max lets more through in the same window, a smaller one fewer', async () => {
      let q = ctx.queue({ leaseSeconds: 300, rateLimit: { max: 2, perSeconds: 60 } });
      const ids = await postGroups(q, [null, null, null, null, null, null]);
      expect(await claimIds(q, 5)).to.deep.equal(ids.slice(0, 2));
      q = ctx.redefine(q, { leaseSeconds: 300, rateLimit: { max: 3, perSeconds: 60 } });
      s().rulesChanged?.(q.key);
      expect(await claimIds(q, 5)).to.deep.equal([ids[2]]);
      q = ctx.redefine(q, { leaseSeconds: 300, rateLimit: { max: 1, perSeconds: 60 } });
      s().rulesChanged?.(q.key);
      advance(59_999);
      expect(await claimId(q)).to.equal(null);
      advance(1);
      // Only the last lease counts now: it happened at the start, a window ago.
      expect(await claimId(q)).to.equal(ids[3]);
    });

    it('a larger rate limit counts only the leases the smaller one kept, also after a restart', async () => {
      let q = ctx.queue({ leaseSeconds: 300, rateLimit: { max: 2, perSeconds: 60 } });
      const ids = await postGroups(q, [null, null, null, null, null]);
      const t0 = now();
      expect(await claimId(q)).to.equal(ids[0]);
      advance(30_000);
      expect(await claimId(q)).to.equal(ids[1]);
      advance(30_000);
      expect(await claimId(q)).to.equal(ids[2]);
      q = ctx.redefine(q, { leaseSeconds: 300, rateLimit: { max: 3, perSeconds: 120 } });
      s().rulesChanged?.(q.key);
      await s().counts(q);
      await ctx.h().reopen();
      // The window of two held the leases at t0 + 30 s and t0 + 60 s: one more may happen now.
      expect(await claimId(q)).to.equal(ids[3]);
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 30_000 + 120_000 });
    });

    it('a lease that ends in a queue with maxActive or groupMaxActive answers a held claim at once (decisions §8.5)', async () => {
      for (const def of [{ maxActive: 1 }, { groupMaxActive: 1 }] as QueueDefinition[]) {
        const q = ctx.queue(def);
        const [a, b] = await postGroups(q, ['g', 'g']);
        expect(await claimId(q)).to.equal(a);
        const started = Date.now();
        let answered = false;
        const waiting = ctx
          .h()
          .waits.claim(q, { worker: 'patient', waitMs: 20_000 })
          .finally(() => (answered = true));
        await sleep(100);
        expect(answered, 'answered while held').to.equal(false);
        await s().result(q, a!, '{}');
        expect((await waiting)?.id).to.equal(b);
        expect(Date.now() - started).to.be.below(10_000);
      }
    });

    it('limits added by a definition change apply at the next claim', async () => {
      let q = ctx.queue();
      const ids = await postGroups(q, ['g', 'g', 'h', 'h']);
      expect(await claimId(q)).to.equal(ids[0]);
      q = ctx.redefine(q, { groupMaxActive: 1 });
      expect(await claimId(q)).to.equal(ids[2]);
      q = ctx.redefine(q, { groupMaxActive: 1, maxActive: 2 });
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'maxActive' });
      q = ctx.redefine(q, {});
      expect(await claimIds(q, 5)).to.deep.equal([ids[1], ids[3]]);
    });
  });

  describe('fairness "groups" (decisions §8.5)', () => {
    it('claims take turns among the groups, oldest item first within each; items without a group form one group', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const ids = await postGroups(q, ['a', 'a', 'a', 'b', 'b', null, 'b']);
      expect(await drain(q)).to.deep.equal([ids[0], ids[3], ids[5], ids[1], ids[4], ids[2], ids[6]]);
    });

    it('a group never served goes before every other; among those, the one with the oldest item', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const first = await postGroups(q, ['a', 'b', 'a', 'b']);
      expect(await claimId(q)).to.equal(first[0]);
      expect(await claimId(q)).to.equal(first[1]);
      const late = await postGroups(q, ['d', 'c']);
      expect(await drain(q)).to.deep.equal([late[0], late[1], first[2], first[3]]);
    });

    it('a group served and left with nothing that gets an item again is the least recently served: it goes before the groups served after it', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const first = await postGroups(q, ['a', 'b', 'c', 'b', 'c']);
      for (const id of first.slice(0, 3)) expect(await claimId(q)).to.equal(id);
      const again = await postGroups(q, ['a']);
      expect(await drain(q)).to.deep.equal([again[0], first[3], first[4]]);
    });

    it('priority comes first: the turns run among the groups holding an item of the highest claimable priority', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const low = await postGroups(q, ['a', 'b', 'a']);
      expect(await claimId(q)).to.equal(low[0]);
      const high = await postGroups(q, ['a', 'a', 'c'], { priority: 5 });
      expect(await drain(q)).to.deep.equal([high[2], high[0], high[1], low[1], low[2]]);
    });

    it('a claim of up to max takes its items in the same turns, one item per turn', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const ids = await postGroups(q, ['a', 'a', 'a', 'b', 'c', 'c']);
      expect(await claimIds(q, 4)).to.deep.equal([ids[0], ids[3], ids[4], ids[1]]);
      expect(await claimIds(q, 4)).to.deep.equal([ids[5], ids[2]]);
    });

    it('with criteria, the turns run among the groups holding a matching item', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const ids: string[] = [];
      for (const [group, k] of [['a', 1], ['a', 2], ['b', 2], ['c', 1], ['a', 2], ['b', 1]] as const) ids.push(await post(q, { k }, { group }));
      expect(await drain(q, { k: 2 })).to.deep.equal([ids[1], ids[2], ids[4]]);
      expect(await drain(q, { k: 1 })).to.deep.equal([ids[3], ids[5], ids[0]]);
    });

    it('with groupMaxActive, a group at the limit waits its turn and the others take turns', async () => {
      const q = ctx.queue({ fairness: 'groups', groupMaxActive: 1 });
      const ids = await postGroups(q, ['a', 'a', 'b', 'b', 'c']);
      expect(await claimIds(q, 5)).to.deep.equal([ids[0], ids[2], ids[4]]);
      await s().result(q, ids[2]!, '{}');
      await s().result(q, ids[0]!, '{}');
      // Both free again: a was served first, so it goes first.
      expect(await claimIds(q, 5)).to.deep.equal([ids[1], ids[3]]);
    });

    it('the turns survive a restart: the order after it is the order before', async () => {
      const q = ctx.queue({ fairness: 'groups' });
      const ids = await postGroups(q, ['a', 'b', 'b', 'a']);
      expect(await claimIds(q, 2)).to.deep.equal([ids[0], ids[1]]);
      await ctx.h().reopen();
      // a was served before b: its turn, though b's item is older.
      expect(await drain(q)).to.deep.equal([ids[3], ids[2]]);
    });

    it('the rate window survives a restart: leases made before it still count', async () => {
      const q = ctx.queue({ rateLimit: { max: 2, perSeconds: 10 } });
      const ids = await postGroups(q, [null, null, null, null]);
      const t0 = now();
      expect(await claimIds(q, 5)).to.deep.equal(ids.slice(0, 2));
      await ctx.h().reopen(() => advance(3000));
      const held: ClaimHold = {};
      expect(await claimId(q, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 10_000 });
      advance(7000);
      expect(await claimId(q)).to.equal(ids[2]);
      await ctx.h().reopen();
      expect(await claimId(q)).to.equal(ids[3]);
      expect(await claimId(q)).to.equal(null);
    });

    it('groupsWaiting counts the groups holding a claimable item, for a queue with fairness "groups" or groupMaxActive; null for others', async () => {
      const plain = ctx.queue();
      await postGroups(plain, ['a', 'b']);
      expect(await groupsWaiting(plain)).to.equal(null);
      const q = ctx.queue({ fairness: 'groups', leaseSeconds: 300 });
      expect(await groupsWaiting(q)).to.equal(0);
      const ids = await postGroups(q, ['a', 'a', 'b', null]);
      await post(q, {}, { group: 'c', delaySeconds: 60 });
      expect(await groupsWaiting(q)).to.equal(3);
      expect(await claimIds(q, 3)).to.deep.equal([ids[0], ids[2], ids[3]]);
      expect(await groupsWaiting(q)).to.equal(1);
      advance(60_000);
      // A request applies what is due (as every one does), and the delayed item is claimable.
      await settle();
      await s().counts(q);
      expect(await groupsWaiting(q)).to.equal(2);
      await ctx.h().reopen();
      expect(await groupsWaiting(q)).to.equal(2);
      const capped = ctx.queue({ groupMaxActive: 1 });
      const more = await postGroups(capped, ['a', 'a', 'b']);
      expect(await claimId(capped)).to.equal(more[0]);
      // A group at its limit still holds a claimable item.
      expect(await groupsWaiting(capped)).to.equal(2);
    });
  });
}
