import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import type { Criteria } from '../../src/engine/criteria.js';
import type { ClaimHold } from '../../src/engine/limits.js';
import { Queue, type Change, type Place } from '../../src/engine/queue.js';
import type { PostOptions } from '../../src/engine/rules.js';

/** A queue driven by a fake clock. */
function setup(def: QueueDefinition = {}) {
  const q = new Queue(resolveQueue({ leaseSeconds: 600, ...def }));
  let seq = 0;
  const t = 1_000_000;
  const post = (body: object, options?: PostOptions): string => q.post({ id: (seq++).toString(16).padStart(16, '0'), body: JSON.stringify(body), postedBy: 'p', idempotencyKey: null, options }, t).item.id;
  /** A claim cut into steps of `budget` parsed bodies, as the embedded store runs it. */
  const claim = (criteria: Criteria | undefined, budget: number, held?: ClaimHold): string | null => {
    let after: Place | null = null;
    for (let steps = 0; steps < 100_000; steps++) {
      const step: Change | Place | null = q.claimStep('w', criteria, t, budget, after, held);
      if (step === null) return null;
      if ('item' in step) return step.item.id;
      after = step;
    }
    throw new Error('the claim did not end');
  };
  return { q, post, claim };
}

/** Posts `n` items to each group, alternating, with `k` = 1 only for the last item of group `match`. */
function fill(post: (body: object, options?: PostOptions) => string, groups: string[], n: number, match: string): void {
  for (let i = 0; i < n; i++) for (const group of groups) post({ k: group === match && i === n - 1 ? 1 : 0 }, { group });
}

describe('queue engine: claims under limits and fairness, cut into steps (decisions §8.5)', () => {
  it('a fairness claim with criteria cut into steps of one parse takes what an uncut claim takes', () => {
    for (const budget of [1, 2, 7, Infinity]) {
      const { post, claim } = setup({ fairness: 'groups' });
      const ids: string[] = [];
      for (const [group, k] of [['a', 1], ['a', 2], ['b', 2], ['c', 1], ['a', 2], ['b', 1], ['c', 2]] as const) ids.push(post({ k }, { group }));
      const order: Array<string | null> = [];
      for (let i = 0; i < 4; i++) order.push(claim({ k: 2 }, budget));
      expect(order, `budget ${budget}`).to.deep.equal([ids[1], ids[2], ids[6], ids[4]]);
    }
  });

  it('a fairness claim with criteria looks past groups with nothing matching, each body parsed once per claim, however the steps fall', () => {
    const { post, claim } = setup({ fairness: 'groups' });
    fill(post, ['a', 'b', 'c', 'd'], 50, 'd');
    let parses = 0;
    const parse = JSON.parse;
    JSON.parse = ((text: string) => (parses++, parse(text))) as typeof JSON.parse;
    try {
      expect(claim({ k: 1 }, 3)).to.not.equal(null);
    } finally {
      JSON.parse = parse;
    }
    expect(parses).to.be.at.most(200);
  });

  it('groupMaxActive with criteria, cut into steps, skips a group at the limit and is held only by a matching item there', () => {
    for (const budget of [1, 3, Infinity]) {
      const { post, claim } = setup({ groupMaxActive: 1 });
      const a1 = post({ k: 1 }, { group: 'a' });
      post({ k: 1 }, { group: 'a' });
      post({ k: 2 }, { group: 'b' });
      const b2 = post({ k: 1 }, { group: 'b' });
      expect(claim({ k: 1 }, budget)).to.equal(a1);
      expect(claim({ k: 1 }, budget)).to.equal(b2);
      const held: ClaimHold = {};
      expect(claim({ k: 1 }, budget, held)).to.equal(null);
      expect(held, `budget ${budget}`).to.deep.equal({ reason: 'groupMaxActive' });
    }
  });

  it('without criteria, a claim under groupMaxActive does not walk the items of a saturated group: a claim costs the same with 100,000 of them waiting', function () {
    this.timeout(20_000);
    const { q, post, claim } = setup({ groupMaxActive: 1 });
    for (let i = 0; i < 100_000; i++) post({}, { group: 'big' });
    for (let i = 0; i < 2000; i++) post({}, { group: `g${i}` });
    expect(claim(undefined, Infinity)).to.not.equal(null);
    const t0 = performance.now();
    let taken = 0;
    while (claim(undefined, Infinity) !== null) taken++;
    expect(taken).to.equal(2000);
    // 2,000 claims, each O(log groups): a walk past the saturated group's items would take seconds.
    expect(performance.now() - t0).to.be.below(1500);
    expect(q.groupsWaiting()).to.equal(1);
  });
});
