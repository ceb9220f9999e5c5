import { expect } from 'chai';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import { CALLBACK_GIVE_UP_MS } from '../../src/engine/rules.js';
import type { OwedCallback, QueueRef, Store, TakenCallback } from '../../src/store/store.js';
import type { StoreUnderTest } from './support/stores.js';

/** What the conformance suite hands the callback tests: its store under test and its helpers. */
export interface CallbackSuite {
  h(): StoreUnderTest;
  /** A new queue with these rules, known to the store's configFor. */
  queue(def?: QueueDefinition): QueueRef;
  post(q: QueueRef, body?: object): Promise<string>;
  claimId(q: QueueRef): Promise<string | null>;
  advance(ms: number): void;
}

const HOOK = 'http://127.0.0.1:9/hook';
const OWN = 'http://127.0.0.1:9/own';
const HOLD = 60_000;

/**
 * decisions §9.2 for every store: a callback owed is written in the same atomic step as the change
 * that ended its item, taken for one attempt at a time, retried by the backoff, dropped after 24
 * hours, and holds its item's retention back while owed.
 */
export function callbackConformance(t: CallbackSuite): void {
  describe('callbacks when an item ends (decisions §9.2)', () => {
    const s = (): Store => t.h().store;
    /** The callbacks of queue `q` due now, taken (others' are left owed, as they were: taken with a hold of 0). */
    async function take(q: QueueRef, hold = HOLD): Promise<TakenCallback[]> {
      const all = await s().takeCallbacks(1000, hold);
      const mine = all.filter((c) => c.queue === q.key);
      // Callbacks of other queues of the suite go back as they were, as a hold that ran out would leave them.
      for (const c of all) if (c.queue !== q.key) await s().settleCallback(c, { delivered: true });
      return mine;
    }
    async function postOwn(q: QueueRef, url: string): Promise<string> {
      return (await s().post(q, { body: '{}', postedBy: 'p', options: { callback: url } })).id;
    }
    async function finishOne(q: QueueRef): Promise<string> {
      const id = await t.post(q);
      await t.claimId(q);
      await s().result(q, id, '{"ok":true}');
      return id;
    }

    it('a result owes one callback to the queue\'s URL, written with the change: taken with the status record, delivered once', async () => {
      const q = t.queue({ callback: HOOK });
      const id = await finishOne(q);
      expect((await s().overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 0 });
      const [c, ...rest] = await take(q);
      expect(rest).to.deep.equal([]);
      expect(c).to.deep.include({ queue: q.key, itemId: id, event: 'finished', url: HOOK, tries: 0 });
      expect(c!.record).to.deep.include({ id, status: 'finished', result: '{"ok":true}' });
      expect(await s().settleCallback(c!, { delivered: true })).to.equal('delivered');
      expect(await take(q)).to.deep.equal([]);
      expect((await s().overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 0, failing: 0 });
    });

    it('the item\'s own callback comes before the queue\'s; with neither, nothing is owed', async () => {
      const q = t.queue({ callback: HOOK });
      const id = await postOwn(q, OWN);
      await s().cancel(q, id);
      expect((await take(q)).map((c) => [c.itemId, c.url, c.event])).to.deep.equal([[id, OWN, 'cancelled']]);
      const plain = t.queue();
      const other = await postOwn(plain, OWN);
      await finishOne(plain);
      await s().cancel(plain, other);
      expect((await take(plain)).map((c) => c.url)).to.deep.equal([OWN]);
    });

    it('every way an item ends owes one: a final error, a lease ended on the last attempt, a timeout, a bulk cancel; a re-queue owes none', async () => {
      const q = t.queue({ callback: HOOK, maxAttempts: 2, leaseSeconds: 10 });
      const failed = await t.post(q, { n: 1 });
      await t.claimId(q);
      expect((await s().error(q, failed, '{}'))?.status).to.equal('pending');
      expect(await take(q)).to.deep.equal([]);
      await t.claimId(q);
      expect((await s().error(q, failed, '{}'))?.status).to.equal('failed');
      expect((await take(q)).map((c) => [c.itemId, c.event])).to.deep.equal([[failed, 'failed']]);

      const leased = t.queue({ callback: HOOK, maxAttempts: 1, leaseSeconds: 10 });
      const gone = await t.post(leased);
      await t.claimId(leased);
      t.advance(10_001);
      await t.h().settle?.();
      expect((await s().get(leased, gone))?.status).to.equal('failed');
      expect((await take(leased)).map((c) => [c.itemId, c.event])).to.deep.equal([[gone, 'failed']]);

      const slow = t.queue({ callback: HOOK, timeoutSeconds: 5 });
      const late = await t.post(slow);
      t.advance(5_001);
      await t.h().settle?.();
      expect((await s().get(slow, late))?.status).to.equal('timedout');
      expect((await take(slow)).map((c) => [c.itemId, c.event])).to.deep.equal([[late, 'timedout']]);

      const many = t.queue({ callback: HOOK });
      const ids = [await t.post(many), await t.post(many)];
      expect(await s().bulk(many, { kind: 'cancel', statuses: ['pending'] }, 10)).to.deep.equal({ changed: 2, more: false });
      expect((await take(many)).map((c) => c.itemId).sort()).to.deep.equal([...ids].sort());
    });

    it('a callback taken is held: no other take gets it until the hold runs out; a late settle of the first attempt changes nothing', async () => {
      const q = t.queue({ callback: HOOK });
      await finishOne(q);
      const [first] = await take(q, 5_000);
      expect(await take(q, 5_000)).to.deep.equal([]);
      t.advance(5_001);
      const [second] = await take(q, 5_000);
      expect(second?.id).to.equal(first!.id);
      expect(await s().settleCallback(first!, { delivered: true })).to.equal('stale');
      expect(await s().settleCallback(second!, { delivered: true })).to.equal('delivered');
      expect(await s().settleCallback(second!, { delivered: true })).to.equal('stale');
    });

    it('a store that holds its own callbacks hands each over once its change is durable, with the record it ended with: no take gets it while held; a release as taken makes it due; the hold runs out as a take\'s; one not wanted is due at once', async function () {
      const store = s();
      if (!store.holdOwnCallbacks || !store.releaseCallbacks) return this.skip();
      const q = t.queue({ callback: HOOK });
      const born: TakenCallback[] = [];
      let wants = true;
      store.holdOwnCallbacks({ holdMs: HOLD, wants: () => wants, deliver: (list) => born.push(...list) });
      const x = await finishOne(q);
      expect(born.map((c) => [c.itemId, c.event, c.url, c.tries])).to.deep.equal([[x, 'finished', HOOK, 0]]);
      expect(born[0]!.record).to.deep.include({ id: x, status: 'finished', result: '{"ok":true}', attempts: 1 });
      expect(await take(q)).to.deep.equal([]);
      expect((await store.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 0 });
      // Released only as taken (same dueAt and tries): then due at once, for any taker.
      await store.releaseCallbacks([{ ...born[0]!, tries: 3 }]);
      expect(await take(q)).to.deep.equal([]);
      await store.releaseCallbacks([born[0]!]);
      t.advance(1);
      const [again] = await take(q);
      expect(again?.id).to.equal(born[0]!.id);
      expect(await store.settleCallback(born[0]!, { delivered: true })).to.equal('stale');
      expect(await store.settleCallback(again!, { delivered: true })).to.equal('delivered');
      // A born callback settles like a taken one.
      await finishOne(q);
      expect(born).to.have.length(2);
      expect(await store.settleCallback(born[1]!, { delivered: true })).to.equal('delivered');
      // Not attempted within its hold: any taker gets it then.
      const z = await finishOne(q);
      expect(born).to.have.length(3);
      t.advance(HOLD + 1);
      const [late] = await take(q);
      expect(late?.itemId).to.equal(z);
      expect(await store.settleCallback(late!, { delivered: true })).to.equal('delivered');
      // While the delivery wants no more, a callback is owed due at once.
      wants = false;
      const w = await finishOne(q);
      expect(born).to.have.length(3);
      const [owed, ...rest] = await take(q);
      expect([owed?.itemId, rest]).to.deep.equal([w, []]);
      expect(await store.settleCallback(owed!, { delivered: true })).to.equal('delivered');
      expect((await store.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 0, failing: 0 });
    });

    it('a failed attempt is tried again after 1 s, then 2 s, 4 s …; failing shows; 24 hours after the item ended it is dropped with a callback-dropped event', async () => {
      const q = t.queue({ callback: HOOK });
      const id = await finishOne(q);
      let [c] = await take(q);
      expect(await s().settleCallback(c!, { delivered: false, reason: 'refused' })).to.equal('retrying');
      expect((await s().overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 1 });
      t.advance(999);
      expect(await take(q)).to.deep.equal([]);
      t.advance(1);
      [c] = await take(q);
      expect(c!.tries).to.equal(1);
      await s().settleCallback(c!, { delivered: false, reason: 'refused' });
      t.advance(1_999);
      expect(await take(q)).to.deep.equal([]);
      t.advance(1);
      [c] = await take(q);
      expect(c!.tries).to.equal(2);
      t.advance(CALLBACK_GIVE_UP_MS);
      expect(await s().settleCallback(c!, { delivered: false, reason: 'refused' })).to.equal('dropped');
      expect((await s().overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 0, failing: 0 });
      const all = await t.h().events?.();
      if (all) expect(all.filter((e) => e.id === id && e.event === 'callback-dropped')).to.have.length(1);
    });

    it('retention does not purge an item whose callback is owed; once delivered, it is purged as usual', async () => {
      const q = t.queue({ callback: HOOK, retainSeconds: 0 });
      const id = await finishOne(q);
      t.advance(1_000);
      await t.h().settle?.();
      expect((await s().get(q, id))?.status).to.equal('finished');
      const [c] = await take(q);
      await s().settleCallback(c!, { delivered: true });
      t.advance(1);
      await t.h().settle?.();
      expect(await s().get(q, id)).to.equal(null);
    });

    it('a callback owed survives a restart, failures and all', async () => {
      const q = t.queue({ callback: HOOK });
      const id = await finishOne(q);
      const [c] = await take(q);
      await s().settleCallback(c!, { delivered: false, reason: 'refused' });
      await t.h().reopen();
      t.advance(1_000);
      const [again] = await take(q);
      expect(again).to.deep.include({ itemId: id, tries: 1, url: HOOK, event: 'finished' } satisfies Partial<OwedCallback>);
      expect((await s().overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 1 });
    });
  });
}
