import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import { Item, Queue } from '../../src/engine/queue.js';
import type { PostOptions } from '../../src/engine/rules.js';

/** A copy of an item as the journal would give it back: every field, as a new object. */
function clone(i: Item): Item {
  const copy = new Item(i.id, i.ord, i.body, i.postedBy, i.postedAt, i.status);
  const { idempotencyKey, updatedAt, finishedAt, attempts, leaseWorker, leaseUntil, availableAt, progress, result, error, fetchedAt } = i;
  return Object.assign(copy, { idempotencyKey, updatedAt, finishedAt, attempts, leaseWorker, leaseUntil, availableAt, progress, result, error, fetchedAt });
}

/** A queue driven by a fake clock: `t` is advanced by hand, nothing sleeps. */
function setup(def: QueueDefinition = {}) {
  const q = new Queue(resolveQueue(def));
  let seq = 0;
  const clock = { t: 1_000_000 };
  const post = (body: object = {}, key: string | null = null, options?: PostOptions) =>
    q.post({ id: (seq++).toString(16).padStart(16, '0'), body: JSON.stringify(body), postedBy: 'alice', idempotencyKey: key, options }, clock.t).item;
  return { q, clock, post };
}

describe('queue engine (decisions §3)', () => {
  describe('priorities and delays (decisions §8.1)', () => {
    it('with 300,000 items waiting, most of them delayed and ahead in claim order, claims take the highest claimable priority at once and each delayed item when its time comes, and the operators\' view lists the first pending items without a scan (decisions §8.1, §5.1)', function () {
      this.timeout(20_000);
      const { q, clock, post } = setup();
      for (let i = 0; i < 200_000; i++) post({}, null, { priority: 100, delaySeconds: 60 + (i % 50) });
      for (let i = 0; i < 100_000; i++) post({}, null, { priority: (i % 201) - 100 });
      const t0 = performance.now();
      const first = Array.from({ length: 1000 }, () => q.claim('w', undefined, clock.t)!.item);
      // A thousand claims, each O(log n): well under the time of a walk past the delayed items.
      expect(performance.now() - t0).to.be.below(2000);
      expect(first.every((i) => i.priority >= 95 && i.availableAt === 0)).to.equal(true);
      expect(first.map((i) => i.priority)).to.deep.equal([...first.map((i) => i.priority)].sort((a, b) => b - a));
      // The operators' view: the first pending items in claim order, waiting ones included, without a scan.
      const t1 = performance.now();
      for (let i = 0; i < 1000; i++) q.oldestPending(20);
      expect(performance.now() - t1).to.be.below(2000);
      expect(q.oldestPending(3).map((i) => i.ord)).to.deep.equal([1, 2, 3]);
      expect(q.oldestPendingAt()).to.equal(clock.t);
      clock.t += 60_000;
      q.tick(clock.t);
      expect(q.claim('w', undefined, clock.t)!.item).to.include({ priority: 100, ord: 1 });
    });

    it('a criteria claim cut into steps walks priority by priority, and an item made claimable ahead of where it stopped is found (decisions §3.3, §8.1)', () => {
      const { q, clock, post } = setup({ retryDelaySeconds: 0 });
      const high = post({ kind: 'a' }, null, { priority: 5 });
      post({ kind: 'a' });
      post({ kind: 'a' }, null, { priority: -5 });
      let step = q.claimStep('w', { kind: 'b' }, clock.t, 2, null);
      expect(step).to.deep.equal({ priority: 0, ord: 2 });
      step = q.claimStep('w', { kind: 'b' }, clock.t, 2, step as { priority: number; ord: number });
      expect(step).to.equal(null);
      const b = post({ kind: 'b' }, null, { priority: 9 });
      const low = post({ kind: 'b' }, null, { priority: -9 });
      expect(q.claim('w', { kind: 'b' }, clock.t)!.item.id).to.equal(b.id);
      expect(q.claim('w', { kind: 'b' }, clock.t)!.item.id).to.equal(low.id);
      expect(q.claim('w', { kind: 'a' }, clock.t)!.item.id).to.equal(high.id);
    });
  });

  describe('posting and claiming', () => {
    it('a posted item is pending with no attempts (interface §3)', () => {
      const { post } = setup();
      const item = post({ a: 1 });
      expect(item.status).to.equal('pending');
      expect(item.attempts).to.equal(0);
      expect(item.finishedAt).to.equal(null);
    });

    it('claim takes the oldest pending item first (interface §4.2 rule 1)', () => {
      const { q, clock, post } = setup();
      const first = post();
      clock.t += 1;
      const second = post();
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(first.id);
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(second.id);
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
    });

    it('items posted in the same millisecond are claimed in arrival order', () => {
      const { q, clock, post } = setup();
      const ids = [post(), post(), post()].map((i) => i.id);
      expect([1, 2, 3].map(() => q.claim('w', undefined, clock.t)!.item.id)).to.deep.equal(ids);
    });

    it('claim increments attempts and sets the lease {worker, until = now + leaseSeconds} (decisions §3.2)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 30 });
      post();
      const { item } = q.claim('w1', undefined, clock.t)!;
      expect(item.status).to.equal('claimed');
      expect(item.attempts).to.equal(1);
      expect(item.leaseWorker).to.equal('w1');
      expect(item.leaseUntil).to.equal(clock.t + 30_000);
    });

    it('claim with criteria returns the oldest match and leaves the others pending (decisions §3.3)', () => {
      const { q, clock, post } = setup();
      post({ kind: 'a' });
      const b = post({ kind: 'b' });
      post({ kind: 'b' });
      expect(q.claim('w', { kind: 'b' }, clock.t)!.item.id).to.equal(b.id);
      expect(q.claim('w', { kind: 'c' }, clock.t)).to.equal(null);
      expect(q.counts()).to.include({ pending: 2, claimed: 1, finished: 0 });
    });

    it('counts are kept as items change and as changes are taken back: the same as a scan of the items (decisions §5.1)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 30, retainSeconds: 1 });
      const scan = (): Record<string, number> => {
        const out: Record<string, number> = { pending: 0, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 };
        for (const item of q.items.values()) out[item.status]!++;
        return out;
      };
      const a = post();
      const b = post();
      post();
      const claim = q.claim('w', undefined, clock.t)!;
      expect(q.counts()).to.deep.equal(scan());
      const progress = q.progress(b.id, '{}', clock.t)!.change!;
      expect(q.counts()).to.deep.equal(scan());
      q.revert(progress);
      expect(q.counts()).to.deep.equal(scan());
      q.result(a.id, '{}', clock.t);
      expect(q.counts()).to.include({ finished: 1, claimed: 0, pending: 2 });
      clock.t += 10 * 86_400_000;
      const purged = q.tick(clock.t);
      expect(q.counts()).to.deep.equal(scan());
      for (const change of purged.reverse()) q.revert(change);
      expect(q.counts()).to.deep.equal(scan());
      q.revert(claim);
      expect(q.counts()).to.deep.equal(scan());
    });

    it('a claim with criteria that found nothing still finds an item posted after it, and other criteria still see the older items (decisions §3.3)', () => {
      const { q, clock, post } = setup();
      const a = post({ kind: 'a' });
      post({ kind: 'a' });
      expect(q.claim('w', { kind: 'b' }, clock.t)).to.equal(null);
      expect(q.claim('w', { kind: 'b' }, clock.t)).to.equal(null);
      const b = post({ kind: 'b' });
      expect(q.claim('w', { kind: 'b' }, clock.t)!.item.id).to.equal(b.id);
      expect(q.claim('w', { kind: { in: ['a', 'c'] } }, clock.t)!.item.id).to.equal(a.id);
    });

    it('criteria that differ only where a number is past a double\'s range (1e400 against null) are not taken for the same criteria: one\'s empty walk never hides the other\'s match (decisions §3.3)', () => {
      const { q, clock } = setup();
      const item = q.post({ id: 'aaaaaaaaaaaaaaaa', body: '{"n":5}', postedBy: 'alice', idempotencyKey: null }, clock.t).item;
      const criteria = (text: string) => JSON.parse(text) as Record<string, unknown>;
      expect(q.claim('w', criteria('{"n":{"lt":null}}'), clock.t), 'lt null compares no number').to.equal(null);
      expect(q.claim('w', criteria('{"n":{"lt":1e400}}'), clock.t)?.item.id, 'lt 1e400 (Infinity)').to.equal(item.id);

      const big = setup();
      const huge = big.q.post({ id: 'bbbbbbbbbbbbbbbb', body: '{"n":1e400}', postedBy: 'alice', idempotencyKey: null }, big.clock.t).item;
      expect(big.q.claim('w', criteria('{"n":null}'), big.clock.t)).to.equal(null);
      expect(big.q.claim('w', criteria('{"n":1e400}'), big.clock.t)?.item.id).to.equal(huge.id);
    });

    it('a claim with criteria finds again an item that became pending behind the items an earlier claim with the same criteria had checked: after an error, a lease that ended, a retry delay (decisions §3.2, §3.3, §3.4)', () => {
      const { q, clock, post } = setup({ maxAttempts: 5, leaseSeconds: 10, retryDelaySeconds: 0 });
      const match = post({ kind: 'b' });
      post({ kind: 'a' });
      const claimMatch = () => q.claim('w', { kind: 'b' }, clock.t)?.item.id ?? null;
      expect(claimMatch()).to.equal(match.id);
      expect(claimMatch(), 'checked through the newest item').to.equal(null);
      q.error(match.id, '{}', clock.t);
      expect(claimMatch(), 'after an error').to.equal(match.id);
      expect(claimMatch()).to.equal(null);
      clock.t += 10_000;
      q.tick(clock.t);
      expect(claimMatch(), 'after the lease ended').to.equal(match.id);

      const delayed = setup({ maxAttempts: 5, retryDelaySeconds: 5 });
      const item = delayed.post({ kind: 'b' });
      delayed.post({ kind: 'a' });
      expect(delayed.q.claim('w', { kind: 'b' }, delayed.clock.t)!.item.id).to.equal(item.id);
      delayed.q.error(item.id, '{}', delayed.clock.t);
      expect(delayed.q.claim('w', { kind: 'b' }, delayed.clock.t)).to.equal(null);
      delayed.clock.t += 5_000;
      delayed.q.tick(delayed.clock.t);
      expect(delayed.q.claim('w', { kind: 'b' }, delayed.clock.t)!.item.id, 'after the retry delay').to.equal(item.id);
    });

    it('a claim with criteria cut into steps of a few bodies each goes on where the last step stopped, and finds the same item as one walk (decisions §3.3)', () => {
      const { q, clock, post } = setup();
      const misses = [1, 2, 3, 4, 5].map(() => post({ kind: 'a' }));
      const match = post({ kind: 'b' });
      const steps: Array<number | string | null> = [];
      let step = q.claimStep('w', { kind: 'b' }, clock.t, 2, null);
      while (step !== null && !('item' in step)) {
        steps.push(step.ord);
        step = q.claimStep('w', { kind: 'b' }, clock.t, 2, step);
      }
      steps.push(step === null ? null : step.item.id);
      expect(steps).to.deep.equal([misses[1]!.ord, misses[3]!.ord, match.id]);
      expect(q.claimStep('w', { kind: 'b' }, clock.t, 2, null), 'nothing left to walk').to.equal(null);
    });
  });

  describe('submissions', () => {
    it('an accepted progress makes the item processing and extends the lease (a heartbeat)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 10 });
      const item = post();
      q.claim('w', undefined, clock.t);
      clock.t += 8_000;
      const out = q.progress(item.id, '{"percent":50}', clock.t)!;
      expect(out).to.include({ accepted: true, status: 'processing' });
      expect(item.leaseUntil).to.equal(clock.t + 10_000);
      clock.t += 8_000; // past the first lease, within the extended one
      expect(q.tick(clock.t)).to.have.length(0);
      expect(item.status).to.equal('processing');
    });

    it('a result finishes a non-terminal item and sets finishedAt (interface §4.2 rule 6)', () => {
      const { q, clock, post } = setup();
      const item = post();
      q.claim('w', undefined, clock.t);
      clock.t += 5;
      expect(q.result(item.id, '{"output":"x"}', clock.t)).to.include({ accepted: true, status: 'finished' });
      expect(item.finishedAt).to.equal(clock.t);
      expect(item.result).to.equal('{"output":"x"}');
    });

    it('a result is accepted even for a pending item that was never claimed', () => {
      const { q, clock, post } = setup();
      const item = post();
      expect(q.result(item.id, '{}', clock.t)).to.include({ accepted: true, status: 'finished' });
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
    });

    it('submissions to a terminal item are accepted:false with its status and change nothing (interface §3)', () => {
      const { q, clock, post } = setup();
      const item = post();
      q.result(item.id, '{"first":1}', clock.t);
      const before = { ...item };
      clock.t += 10;
      expect(q.result(item.id, '{"second":1}', clock.t)).to.deep.equal({ accepted: false, status: 'finished' });
      expect(q.progress(item.id, '{}', clock.t)).to.deep.equal({ accepted: false, status: 'finished' });
      expect(q.error(item.id, '{}', clock.t)).to.deep.equal({ accepted: false, status: 'finished' });
      expect(q.cancel(item.id, clock.t)).to.deep.equal({ accepted: false, status: 'finished' });
      expect(item).to.deep.equal(before);
    });

    it('unknown ids give null (decisions §3.7)', () => {
      const { q, clock } = setup();
      expect(q.progress('ffffffffffffffff', '{}', clock.t)).to.equal(null);
      expect(q.result('ffffffffffffffff', '{}', clock.t)).to.equal(null);
      expect(q.error('ffffffffffffffff', '{}', clock.t)).to.equal(null);
      expect(q.cancel('ffffffffffffffff', clock.t)).to.equal(null);
    });

    it('an error re-queues while attempts remain, then fails with the submitted record (decisions §3.4, §7)', () => {
      const { q, clock, post } = setup({ maxAttempts: 2 });
      const item = post();
      q.claim('w', undefined, clock.t);
      const first = q.error(item.id, '{"e":1}', clock.t)!;
      expect(first).to.include({ accepted: true, status: 'pending' });
      expect(first.change!.events.map((e) => e.event)).to.deep.equal(['error', 'requeued']);
      q.claim('w', undefined, clock.t);
      const second = q.error(item.id, '{"e":2}', clock.t)!;
      expect(second).to.include({ accepted: true, status: 'failed' });
      expect(second.change!.events.map((e) => e.event)).to.deep.equal(['error', 'failed']);
      expect(item.error).to.equal('{"e":2}');
      expect(item.finishedAt).to.equal(clock.t);
    });

    it('cancel makes a non-terminal item cancelled, and it is never claimed (decisions §3.6)', () => {
      const { q, clock, post } = setup();
      const item = post();
      expect(q.cancel(item.id, clock.t)).to.include({ accepted: true, status: 'cancelled' });
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
      expect(q.result(item.id, '{}', clock.t)).to.deep.equal({ accepted: false, status: 'cancelled' });
    });
  });

  describe('time-driven rules', () => {
    it('purged items are not held by deadlines hours away: the heaps keep entries of items still in the queue, about as many as it holds (decisions §2.2 retainSeconds, timeoutSeconds)', () => {
      const { q, clock, post } = setup({ timeoutSeconds: 3600, retainSeconds: 0 });
      for (let n = 0; n < 5000; n++) {
        const item = post({ n });
        q.claim('w', undefined, clock.t);
        q.result(item.id, '{}', clock.t);
        clock.t += 1;
        expect(q.tick(clock.t).every((c) => c.purged)).to.equal(true);
      }
      expect(q.size).to.equal(0);
      // Each left a timeout entry an hour away and a lease entry a minute away: without the sweep
      // all 10,000 would be held; with it, those of at most 1,024 removals since the last sweep.
      expect(q.deadlineEntries).to.be.at.most(2 * 1024);
      // Items still here keep every deadline: one posted now still times out.
      const kept = post({ kept: true });
      clock.t += 3600 * 1000;
      // It times out, then (retainSeconds 0) is purged in the same tick.
      const out = q.tick(clock.t);
      expect(out.map((c) => [c.item.id, c.events.map((e) => e.event).join(), Boolean(c.purged)])).to.deep.equal([
        [kept.id, 'timedout', false],
        [kept.id, 'purged', true],
      ]);
    });

    it('an expired lease re-queues the item, which keeps its place before younger items (decisions §3.2)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 10, maxAttempts: 3 });
      const old = post();
      clock.t += 1;
      q.claim('w', undefined, clock.t);
      const young = post();
      clock.t += 10_001;
      const changes = q.tick(clock.t);
      expect(changes.map((c) => c.events[0]!.event)).to.deep.equal(['requeued']);
      expect(old.status).to.equal('pending');
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(old.id);
      expect(old.attempts).to.equal(2);
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(young.id);
    });

    it('a lease that ends on the last attempt fails the item with {reason: "lease expired"} (decisions §7)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 1, maxAttempts: 1 });
      const item = post();
      q.claim('w', undefined, clock.t);
      clock.t += 1_000;
      q.tick(clock.t);
      expect(item.status).to.equal('failed');
      expect(JSON.parse(item.error!)).to.deep.equal({ reason: 'lease expired' });
      expect(item.finishedAt).to.equal(clock.t);
    });

    it('a tick that comes after both the timeout and the lease end times the item out when the timeout came first: no lease-end failure (decisions §2.2, §3.2)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 30, maxAttempts: 1, timeoutSeconds: 10 });
      const item = post();
      q.claim('w', undefined, clock.t);
      clock.t += 40_000;
      const changes = q.tick(clock.t);
      expect(item.status).to.equal('timedout');
      expect(item.error).to.equal(null);
      expect(changes.flatMap((c) => c.events.map((e) => e.event))).to.deep.equal(['timedout']);
    });

    it('a lease is not expired a millisecond early', () => {
      const { q, clock, post } = setup({ leaseSeconds: 1 });
      const item = post();
      q.claim('w', undefined, clock.t);
      clock.t += 999;
      expect(q.tick(clock.t)).to.have.length(0);
      expect(item.status).to.equal('claimed');
    });

    it('a late result after the lease was re-queued is still accepted (decisions §3.2)', () => {
      const { q, clock, post } = setup({ leaseSeconds: 1 });
      const item = post();
      q.claim('w1', undefined, clock.t);
      clock.t += 2_000;
      q.tick(clock.t);
      expect(item.status).to.equal('pending');
      expect(q.result(item.id, '{"late":true}', clock.t)).to.include({ accepted: true, status: 'finished' });
      expect(q.claim('w2', undefined, clock.t)).to.equal(null);
    });

    it('retryDelaySeconds keeps a re-queued item unclaimable until the delay has passed (decisions §2.2)', () => {
      const { q, clock, post } = setup({ retryDelaySeconds: 5 });
      const item = post();
      q.claim('w', undefined, clock.t);
      q.error(item.id, '{}', clock.t);
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
      clock.t += 4_999;
      q.tick(clock.t);
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
      clock.t += 1;
      q.tick(clock.t);
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(item.id);
      expect(q.nextDeadline()).to.not.equal(null);
    });

    it('an error for an item that was never claimed also waits out retryDelaySeconds (decisions §2.2, §3.4)', () => {
      const { q, clock, post } = setup({ retryDelaySeconds: 5 });
      const item = post();
      expect(q.error(item.id, '{}', clock.t)).to.include({ accepted: true, status: 'pending' });
      expect(q.claim('w', undefined, clock.t)).to.equal(null);
      clock.t += 5_000;
      q.tick(clock.t);
      expect(q.claim('w', undefined, clock.t)!.item.id).to.equal(item.id);
    });

    it('timeoutSeconds after postedAt makes a non-terminal item timedout (decisions §2.2)', () => {
      const { q, clock, post } = setup({ timeoutSeconds: 3 });
      const waiting = post();
      const working = post();
      q.claim('w', undefined, clock.t);
      clock.t += 2_999;
      expect(q.tick(clock.t)).to.have.length(0);
      clock.t += 1;
      const changes = q.tick(clock.t);
      expect(changes.map((c) => c.events[0]!.event)).to.deep.equal(['timedout', 'timedout']);
      expect(waiting.status).to.equal('timedout');
      expect(working.status).to.equal('timedout');
      expect(q.result(working.id, '{}', clock.t)).to.deep.equal({ accepted: false, status: 'timedout' });
    });

    it('retention from "finished" purges a terminal item retainSeconds after it finished (decisions §2.2)', () => {
      const { q, clock, post } = setup({ retainSeconds: 60 });
      const item = post();
      q.result(item.id, '{}', clock.t);
      clock.t += 59_999;
      expect(q.tick(clock.t)).to.have.length(0);
      clock.t += 1;
      const changes = q.tick(clock.t);
      expect(changes).to.have.length(1);
      expect(changes[0]!.purged).to.equal(true);
      expect(q.items.has(item.id)).to.equal(false);
    });

    it('retention from "fetched" starts at the first fetch of the terminal item, and never-fetched items are kept', () => {
      const { q, clock, post } = setup({ retainFrom: 'fetched', retainSeconds: 10 });
      const fetchedOne = post();
      const neverFetched = post();
      q.result(fetchedOne.id, '{}', clock.t);
      q.result(neverFetched.id, '{}', clock.t);
      clock.t += 100_000;
      expect(q.tick(clock.t)).to.have.length(0);
      expect(q.fetched(fetchedOne, clock.t)).to.not.equal(null);
      expect(q.fetched(fetchedOne, clock.t + 5)).to.equal(null); // only the first fetch stamps
      clock.t += 10_000;
      expect(q.tick(clock.t).map((c) => c.item.id)).to.deep.equal([fetchedOne.id]);
      expect(q.items.has(neverFetched.id)).to.equal(true);
    });

    it('a fetch of a non-terminal item stamps nothing', () => {
      const { q, clock, post } = setup({ retainFrom: 'fetched' });
      const item = post();
      expect(q.fetched(item, clock.t)).to.equal(null);
      expect(item.fetchedAt).to.equal(null);
    });
  });

  describe('definition changes', () => {
    it('a shorter retainSeconds purges already-finished items at the new, earlier time (decisions §2.4)', () => {
      const { q, clock, post } = setup({ retainSeconds: 3600 });
      const item = post();
      q.result(item.id, '{}', clock.t);
      q.reconfigure(resolveQueue({ retainSeconds: 10 }));
      clock.t += 10_000;
      expect(q.tick(clock.t).map((c) => c.purged)).to.deep.equal([true]);
      expect(q.items.has(item.id)).to.equal(false);
    });

    it('switching retainFrom from "fetched" to "finished" starts retention of never-fetched items', () => {
      const { q, clock, post } = setup({ retainFrom: 'fetched', retainSeconds: 10 });
      const item = post();
      q.result(item.id, '{}', clock.t);
      clock.t += 60_000;
      expect(q.tick(clock.t)).to.have.length(0);
      q.reconfigure(resolveQueue({ retainFrom: 'finished', retainSeconds: 10 }));
      expect(q.tick(clock.t).map((c) => c.item.id)).to.deep.equal([item.id]);
    });

    it('a shorter timeoutSeconds times out waiting items at the new, earlier time', () => {
      const { q, clock, post } = setup({ timeoutSeconds: 3600 });
      const item = post();
      q.reconfigure(resolveQueue({ timeoutSeconds: 5 }));
      clock.t += 5_000;
      q.tick(clock.t);
      expect(item.status).to.equal('timedout');
    });
  });

  describe('idempotency and restore', () => {
    it('an idempotency key finds the item it created until the item is purged (decisions §3.5)', () => {
      const { q, clock, post } = setup({ retainSeconds: 1 });
      const item = post({}, 'key-1');
      expect(q.byIdempotencyKey('key-1')).to.equal(item);
      q.result(item.id, '{}', clock.t);
      clock.t += 1_000;
      q.tick(clock.t);
      expect(q.byIdempotencyKey('key-1')).to.equal(undefined);
    });

    it('restore rebuilds indexes: a restored pending item is claimable, a restored lease still expires', () => {
      const { q, clock, post } = setup({ leaseSeconds: 5 });
      const a = post();
      const b = post();
      q.claim('w', undefined, clock.t);
      const copy = new Queue(q.config);
      copy.restore(clone(a));
      copy.restore(clone(b));
      expect(copy.claim('w', undefined, clock.t + 1_000)!.item.id).to.equal(b.id);
      clock.t += 5_000;
      expect(copy.tick(clock.t).map((c) => [c.item.id, c.events[0]!.event])).to.deep.equal([[a.id, 'requeued']]);
    });
  });
});
