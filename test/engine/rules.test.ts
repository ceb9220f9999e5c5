import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import * as rules from '../../src/engine/rules.js';

const T0 = 1_000_000;
const config = resolveQueue({ leaseSeconds: 10, maxAttempts: 2, retryDelaySeconds: 5, timeoutSeconds: 100, retainSeconds: 50 });

function posted(now = T0): rules.ItemRecord {
  return rules.post({ id: '0123456789abcdef', ord: 1, body: '{"n":1}', postedBy: 'alice', idempotencyKey: null }, now).record;
}

function frozen<T>(value: T): T {
  return Object.freeze(value);
}

describe('queue rules as pure functions (decisions §3)', () => {
  it('post: pending, no attempts, postedAt and updatedAt now, one "posted" event (interface §3)', () => {
    const t = rules.post({ id: '0123456789abcdef', ord: 7, body: '{}', postedBy: 'public', idempotencyKey: 'k' }, T0);
    expect(t.record).to.include({ status: 'pending', attempts: 0, postedAt: T0, updatedAt: T0, finishedAt: null, leaseUntil: null, availableAt: 0, ord: 7, idempotencyKey: 'k' });
    expect(t.events).to.deep.equal([{ event: 'posted' }]);
  });

  it('claim: one more attempt and a lease until now + leaseSeconds; the input record is left as it was (decisions §3.2)', () => {
    const r = frozen(posted());
    const t = rules.claim(r, config, 'w1', T0 + 1);
    expect(t.record).to.include({ status: 'claimed', attempts: 1, leaseWorker: 'w1', leaseUntil: T0 + 1 + 10_000, updatedAt: T0 + 1 });
    expect(t.events).to.deep.equal([{ event: 'claimed', worker: 'w1' }]);
    expect(r.status).to.equal('pending');
  });

  it('progress: processing, lease extended; on a pending item it re-takes it; on a terminal one accepted false and no transition (decisions §3.2, interface §3)', () => {
    const claimed = rules.claim(posted(), config, 'w', T0).record;
    const p = rules.progress(claimed, config, '{"percent":5}', T0 + 3000);
    expect(p).to.include({ accepted: true, status: 'processing' });
    expect(p.transition!.record).to.include({ leaseUntil: T0 + 13_000, progress: '{"percent":5}' });
    const waiting = rules.error(claimed, config, '{}', T0 + 1).transition!.record;
    expect(waiting).to.include({ status: 'pending', availableAt: T0 + 1 + 5000 });
    expect(rules.progress(waiting, config, '{}', T0 + 2).transition!.record).to.include({ status: 'processing', availableAt: 0 });
    const done = rules.result(claimed, '{}', T0 + 1).transition!.record;
    expect(rules.progress(done, config, '{}', T0 + 2)).to.deep.equal({ accepted: false, status: 'finished' });
  });

  it('result: accepted for any non-terminal item, finishedAt set; terminal items answer accepted false with their status (interface §4.2 rules 5–6)', () => {
    const s = rules.result(posted(), '{"output":"x"}', T0 + 5);
    expect(s.transition!.record).to.include({ status: 'finished', finishedAt: T0 + 5, result: '{"output":"x"}', leaseUntil: null });
    const cancelled = rules.cancel(posted(), T0 + 1).transition!.record;
    expect(rules.result(cancelled, '{}', T0 + 2)).to.deep.equal({ accepted: false, status: 'cancelled' });
  });

  it('error: re-queued with the retry delay while attempts remain, then failed with the submitted record; both events name the worker (decisions §3.4, §5, §7)', () => {
    const first = rules.claim(posted(), config, 'w', T0).record;
    const e1 = rules.error(first, config, '{"why":1}', T0 + 1);
    expect(e1.status).to.equal('pending');
    expect(e1.transition!.events).to.deep.equal([{ event: 'error', worker: 'w' }, { event: 'requeued', worker: 'w' }]);
    const second = rules.claim(e1.transition!.record, config, 'w2', T0 + 10_000).record;
    const e2 = rules.error(second, config, '{"why":2}', T0 + 10_001);
    expect(e2.transition!.record).to.include({ status: 'failed', error: '{"why":2}', finishedAt: T0 + 10_001 });
    expect(e2.transition!.events).to.deep.equal([{ event: 'error', worker: 'w2' }, { event: 'failed', worker: 'w2' }]);
  });

  it('claimable: pending and past its retry delay, not a millisecond early (decisions §2.2)', () => {
    const requeued = rules.error(rules.claim(posted(), config, 'w', T0).record, config, '{}', T0).transition!.record;
    expect(rules.claimable(requeued, T0 + 4999)).to.equal(false);
    expect(rules.claimable(requeued, T0 + 5000)).to.equal(true);
    expect(rules.claimable(rules.claim(posted(), config, 'w', T0).record, T0)).to.equal(false);
  });

  it('deadlines are read off the record: lease, retry, timeout, retention (from finished or from the first terminal fetch) (decisions §2.2, §3.2)', () => {
    const claimed = rules.claim(posted(), config, 'w', T0).record;
    expect(rules.deadlines(claimed, config)).to.deep.equal({ lease: T0 + 10_000, retry: null, timeout: T0 + 100_000, retention: null });
    const done = rules.result(claimed, '{}', T0 + 1).transition!.record;
    expect(rules.deadlines(done, config)).to.deep.equal({ lease: null, retry: null, timeout: null, retention: T0 + 1 + 50_000 });
    const fromFetch = { ...config, retainFrom: 'fetched' as const };
    expect(rules.deadlines(done, fromFetch).retention).to.equal(null);
    const stamped = rules.fetched(done, T0 + 7)!.record;
    expect(rules.deadlines(stamped, fromFetch).retention).to.equal(T0 + 7 + 50_000);
    expect(rules.fetched(stamped, T0 + 8)).to.equal(null);
    expect(rules.nextDeadline(claimed, config)).to.equal(T0 + 10_000);
  });

  it('lease end: re-queued while attempts remain, failed with {reason:"lease expired"} on the last; nothing a millisecond early (decisions §3.2, §7)', () => {
    const claimed = rules.claim(posted(), config, 'w', T0).record;
    expect(rules.leaseEnded(claimed, config, T0 + 9999)).to.equal(null);
    const requeued = rules.leaseEnded(claimed, config, T0 + 10_000)!;
    expect(requeued.record).to.include({ status: 'pending', leaseUntil: null });
    expect(requeued.events).to.deep.equal([{ event: 'requeued', worker: 'w' }]);
    const again = rules.claim(rules.retryAvailable(requeued.record, config, T0 + 20_000)!.record, config, 'v', T0 + 20_000).record;
    const failed = rules.leaseEnded(again, config, T0 + 30_000)!;
    expect(failed.record).to.include({ status: 'failed', error: rules.LEASE_EXPIRED });
    expect(failed.events).to.deep.equal([{ event: 'failed', worker: 'v' }]);
  });

  it('timeout: a non-terminal item becomes timedout timeoutSeconds after postedAt; retention purges a terminal item (decisions §2.2)', () => {
    const r = posted();
    expect(rules.timedOut(r, config, T0 + 99_999)).to.equal(null);
    const t = rules.timedOut(r, config, T0 + 100_000)!;
    expect(t.record).to.include({ status: 'timedout', finishedAt: T0 + 100_000 });
    expect(rules.retentionEnded(t.record, config, T0 + 150_000)).to.deep.include({ purged: true, events: [{ event: 'purged' }] });
    expect(rules.timedOut(r, resolveQueue({}), T0 + 10 ** 9)).to.equal(null);
  });

  it('due: every rule due at once, in order, as one transition (a lease that ended on the last attempt, then retention) (decisions §3.2, §2.2)', () => {
    const once = resolveQueue({ leaseSeconds: 10, maxAttempts: 1, retainSeconds: 0 });
    const claimed = rules.claim(posted(), once, 'w', T0).record;
    expect(rules.due(claimed, once, T0 + 9_999)).to.equal(null);
    const t = rules.due(claimed, once, T0 + 10_000)!;
    expect(t.purged).to.equal(true);
    expect(t.events.map((e) => e.event)).to.deep.equal(['failed', 'purged']);
  });

  it('due: when a timeout and a lease end have both passed, the earlier decides: a timeout first (or at the same moment) ends the item timedout, with no lease-end event (decisions §2.2, §3.2)', () => {
    const once = resolveQueue({ leaseSeconds: 30, maxAttempts: 1, timeoutSeconds: 10 });
    const claimed = rules.claim(posted(), once, 'w', T0).record;
    const late = rules.due(claimed, once, T0 + 40_000)!;
    expect(late.record).to.include({ status: 'timedout', finishedAt: T0 + 40_000, error: null });
    expect(late.events).to.deep.equal([{ event: 'timedout', status: 'timedout', attempts: 1 }]);
    const tie = resolveQueue({ leaseSeconds: 10, maxAttempts: 1, timeoutSeconds: 10 });
    expect(rules.due(rules.claim(posted(), tie, 'w', T0).record, tie, T0 + 10_000)!.events).to.deep.equal([{ event: 'timedout', status: 'timedout', attempts: 1 }]);
    // The lease first: it ends (re-queued while attempts remain), and then the timeout. Each
    // event says the status its own rule left, as a store that applies them one by one writes it.
    const twice = resolveQueue({ leaseSeconds: 5, maxAttempts: 2, timeoutSeconds: 10 });
    const t = rules.due(rules.claim(posted(), twice, 'w', T0).record, twice, T0 + 40_000)!;
    expect(t.events).to.deep.equal([
      { event: 'requeued', worker: 'w', status: 'pending', attempts: 1 },
      { event: 'timedout', status: 'timedout', attempts: 1 },
    ]);
    expect(t.record.status).to.equal('timedout');
  });
});

describe('post options as pure functions (decisions §8.1)', () => {
  it('postOptions reads delay, at, priority and group at their bounds, and nothing else', () => {
    expect(rules.postOptions({ delay: '0', priority: '-100', group: ' ~' })).to.deep.equal({ options: { delaySeconds: 0, priority: -100, group: ' ~' }, errors: [] });
    expect(rules.postOptions({ delay: '31536000', priority: '100' }).options).to.deep.equal({ delaySeconds: 31_536_000, priority: 100 });
    expect(rules.postOptions({ at: '1700000000000', group: 'x'.repeat(128) }).options).to.deep.equal({ at: 1_700_000_000_000, group: 'x'.repeat(128) });
    expect(rules.postOptions({}).options).to.deep.equal({});
  });

  it('postOptions names each parameter out of range, unknown, repeated, or delay with at, as ?<name>', () => {
    const paths = (query: Record<string, unknown>): string[] => rules.postOptions(query).errors.map((e) => e.path);
    expect(paths({ delay: '31536001' })).to.deep.equal(['?delay']);
    expect(paths({ delay: '-1' })).to.deep.equal(['?delay']);
    expect(paths({ delay: '1.5' })).to.deep.equal(['?delay']);
    expect(paths({ delay: '' })).to.deep.equal(['?delay']);
    expect(paths({ delay: '01' })).to.deep.equal(['?delay']);
    expect(paths({ priority: '101' })).to.deep.equal(['?priority']);
    expect(paths({ priority: '-101' })).to.deep.equal(['?priority']);
    expect(paths({ priority: 'high' })).to.deep.equal(['?priority']);
    expect(paths({ at: '-5' })).to.deep.equal(['?at']);
    expect(paths({ group: '' })).to.deep.equal(['?group']);
    expect(paths({ group: 'x'.repeat(129) })).to.deep.equal(['?group']);
    expect(paths({ group: 'tab\there' })).to.deep.equal(['?group']);
    expect(paths({ group: 'é' })).to.deep.equal(['?group']);
    expect(paths({ priority: ['1', '2'] })).to.deep.equal(['?priority']);
    expect(paths({ wait: '5' })).to.deep.equal(['?wait']);
    expect(paths({ delay: '5', at: '1700000000000' })).to.deep.equal(['?at']);
    for (const e of rules.postOptions({ delay: 'x', colour: 'red' }).errors) expect(e.message).to.match(/^(delay|colour) /);
  });

  it('claimableFrom: postedAt + delay, or at; 0 (at once) for no delay, a delay of 0, or a time already past', () => {
    expect(rules.claimableFrom(undefined, T0)).to.equal(0);
    expect(rules.claimableFrom({}, T0)).to.equal(0);
    expect(rules.claimableFrom({ delaySeconds: 0 }, T0)).to.equal(0);
    expect(rules.claimableFrom({ delaySeconds: 3 }, T0)).to.equal(T0 + 3000);
    expect(rules.claimableFrom({ at: T0 + 1 }, T0)).to.equal(T0 + 1);
    expect(rules.claimableFrom({ at: T0 }, T0)).to.equal(0);
    expect(rules.claimableFrom({ at: T0 - 1 }, T0)).to.equal(0);
  });

  it('post keeps priority and group, and a delayed item is pending with runAt; claimOrder puts the higher priority first, then the older', () => {
    const r = rules.post({ id: '0123456789abcdef', ord: 3, body: '{}', postedBy: 'p', idempotencyKey: null, options: { delaySeconds: 2, priority: 7, group: 'g' } }, T0).record;
    expect(r).to.include({ status: 'pending', postedAt: T0, availableAt: T0 + 2000, priority: 7, group: 'g' });
    expect(rules.runAt(r)).to.equal(T0 + 2000);
    expect(rules.claimable(r, T0 + 1999)).to.equal(false);
    expect(rules.claimable(r, T0 + 2000)).to.equal(true);
    expect(posted()).to.include({ priority: 0, group: null });
    expect(rules.runAt(posted())).to.equal(null);
    const items = [
      { priority: 0, ord: 1 },
      { priority: -1, ord: 2 },
      { priority: 5, ord: 9 },
      { priority: 5, ord: 4 },
    ];
    expect([...items].sort(rules.claimOrder)).to.deep.equal([items[3], items[2], items[0], items[1]]);
  });
});

describe('retries as pure functions, on a fake clock (decisions §8.2)', () => {
  const leased = (attempts: number, cfg = config): rules.ItemRecord => {
    let r = posted();
    for (let n = 0; n < attempts; n++) {
      r = rules.claim(r, cfg, 'w', T0).record;
      if (n < attempts - 1) r = rules.error(r, cfg, '{}', T0, { retryIn: 0 }).transition!.record;
    }
    return r;
  };

  it('retryDelay: fixed is retryDelaySeconds at every attempt; exponential doubles from it and stops at retryDelayMaxSeconds', () => {
    const fixed = resolveQueue({ retryDelaySeconds: 7, retryDelayMaxSeconds: 1 });
    expect([1, 2, 5, 30].map((n) => rules.retryDelay(fixed, n, 'a'))).to.deep.equal([7000, 7000, 7000, 7000]);
    const exp = resolveQueue({ retryDelaySeconds: 3, retryBackoff: 'exponential', retryDelayMaxSeconds: 20 });
    expect([1, 2, 3, 4, 5, 1000].map((n) => rules.retryDelay(exp, n, 'a'))).to.deep.equal([3000, 6000, 12_000, 20_000, 20_000, 20_000]);
    expect(rules.retryDelay(resolveQueue({ retryBackoff: 'exponential' }), 9, 'a'), 'no delay doubles to none').to.equal(0);
    // The largest a definition allows: no overflow, the cap holds.
    const big = resolveQueue({ retryDelaySeconds: 86400, retryBackoff: 'exponential', retryDelayMaxSeconds: 31_536_000 });
    expect(rules.retryDelay(big, 1000, 'a')).to.equal(31_536_000_000);
  });

  it('jitter: each delay is shortened by at most retryJitter of itself, by a fraction spread evenly over items and attempts', () => {
    const cfg = resolveQueue({ retryDelaySeconds: 1000, retryJitter: 0.4 });
    const buckets = new Array<number>(10).fill(0);
    for (let i = 0; i < 10_000; i++) {
      const id = i.toString(16).padStart(16, '0');
      const ms = rules.retryDelay(cfg, 1 + (i % 3), id);
      expect(ms).to.be.within(600_000, 1_000_000);
      expect(Number.isInteger(ms)).to.equal(true);
      buckets[Math.min(9, Math.floor(rules.jitterFraction(id, 1 + (i % 3)) * 10))]!++;
    }
    // Each tenth holds about a tenth: none below 800 or above 1,200 of 10,000.
    for (const n of buckets) expect(n).to.be.within(800, 1200);
    expect(rules.retryDelay(cfg, 2, 'abc'), 'the same item and attempt, the same delay').to.equal(rules.retryDelay(cfg, 2, 'abc'));
  });

  it('error: re-queued after the backoff of its attempt; a lease end too', () => {
    const cfg = resolveQueue({ leaseSeconds: 10, maxAttempts: 5, retryDelaySeconds: 2, retryBackoff: 'exponential' });
    const third = leased(3, cfg);
    expect(rules.error(third, cfg, '{}', T0).transition!.record).to.include({ status: 'pending', availableAt: T0 + 8000 });
    const ended = rules.leaseEnded(third, cfg, T0 + 10_000)!;
    expect(ended.record).to.include({ status: 'pending', availableAt: T0 + 10_000 + 8000 });
  });

  it('error with a wish: retryIn in place of the delay, 0 at once; final fails at once; no attempt left fails whatever retryIn says', () => {
    const cfg = resolveQueue({ maxAttempts: 3, retryDelaySeconds: 60 });
    const r = leased(1, cfg);
    expect(rules.error(r, cfg, '{}', T0, { retryIn: 9 }).transition!.record).to.include({ status: 'pending', availableAt: T0 + 9000 });
    expect(rules.error(r, cfg, '{}', T0, { retryIn: 0 }).transition!.record).to.include({ status: 'pending', availableAt: 0 });
    const final = rules.error(r, cfg, '{"e":1}', T0, { final: true });
    expect(final).to.deep.include({ accepted: true, status: 'failed' });
    expect(final.transition!.record).to.include({ status: 'failed', finishedAt: T0, error: '{"e":1}', attempts: 1 });
    expect(final.transition!.events.map((e) => e.event)).to.deep.equal(['error', 'failed']);
    expect(rules.error(leased(3, cfg), cfg, '{}', T0, { retryIn: 5 }).status).to.equal('failed');
  });

  it('release: a leased item is pending after the delay with one attempt fewer, a "released" event; anything else is left', () => {
    const r = leased(1);
    const t = rules.release(r, 0, T0 + 5);
    expect(t).to.deep.include({ accepted: true, status: 'pending' });
    expect(t.transition!.record).to.include({ status: 'pending', attempts: 0, availableAt: 0, leaseUntil: null, updatedAt: T0 + 5, ord: r.ord });
    expect(t.transition!.events).to.deep.equal([{ event: 'released', worker: 'w' }]);
    expect(rules.release(r, 30, T0).transition!.record.availableAt).to.equal(T0 + 30_000);
    const processing = rules.progress(r, config, '{}', T0).transition!.record;
    expect(rules.release(processing, 0, T0).status).to.equal('pending');
    expect(rules.release(posted(), 0, T0)).to.deep.equal({ accepted: false, status: 'pending' });
    const done = rules.result(r, '{}', T0).transition!.record;
    expect(rules.release(done, 0, T0)).to.deep.equal({ accepted: false, status: 'finished' });
  });

  it('retryWishOf and releaseDelayOf read their parameters at their bounds and name each bad one', () => {
    expect(rules.retryWishOf({})).to.deep.equal({ errors: [] });
    expect(rules.retryWishOf({ retryIn: '0' }).wish).to.deep.equal({ retryIn: 0 });
    expect(rules.retryWishOf({ retryIn: '31536000', other: 'x' }).wish).to.deep.equal({ retryIn: 31_536_000 });
    expect(rules.retryWishOf({ final: 'true' }).wish).to.deep.equal({ final: true });
    expect(rules.retryWishOf({ final: 'false' })).to.deep.equal({ errors: [] });
    const paths = (q: Record<string, unknown>): string[] => rules.retryWishOf(q).errors.map((e) => e.path);
    expect(paths({ retryIn: '31536001' })).to.deep.equal(['?retryIn']);
    expect(paths({ retryIn: '-1' })).to.deep.equal(['?retryIn']);
    expect(paths({ retryIn: ['1', '2'] })).to.deep.equal(['?retryIn']);
    expect(paths({ final: '1' })).to.deep.equal(['?final']);
    expect(paths({ retryIn: '5', final: 'true' })).to.deep.equal(['?final']);
    expect(rules.releaseDelayOf({})).to.deep.equal({ delaySeconds: 0, errors: [] });
    expect(rules.releaseDelayOf({ delay: '31536000' }).delaySeconds).to.equal(31_536_000);
    expect(rules.releaseDelayOf({ delay: '1e3' }).errors.map((e) => e.path)).to.deep.equal(['?delay']);
  });
});
