import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { ModelStore, newModelDisk } from '../../src/store/model-store.js';
import type { ClaimInput, Store } from '../../src/store/store.js';
import { LongPolls, type ClaimHolds } from '../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../src/waiting/notifier.js';

const ref = { key: 'held.example.com/q', host: 'held.example.com', name: 'q', config: resolveQueue({ rateLimit: { max: 1, perSeconds: 60 } }) };

/**
 * The model store behind a rate window that opens at `opensAt` (ms): until then every claim finds
 * nothing and says so as a store does (held: rateLimit, retryAt). Nobody announces the window's
 * opening: only the long poll's own look at retryAt finds the item.
 */
function rateLimited(store: ModelStore, opensAt: () => number, looks: number[]): Store {
  return new Proxy(store, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (key === 'claim' || key === 'claimMany') {
        return (queue: unknown, input: ClaimInput, ...rest: unknown[]) => {
          looks.push(Date.now());
          if (Date.now() < opensAt()) {
            if (input.held) Object.assign(input.held, { reason: 'rateLimit', retryAt: opensAt() });
            return Promise.resolve(key === 'claim' ? null : []);
          }
          return (value as (...a: unknown[]) => Promise<unknown>).apply(target, [queue, input, ...rest]);
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  }) as unknown as Store;
}

describe('held claims look again when the rate window moves on (decisions §8.5)', function () {
  this.timeout(10_000);

  async function setup(opensInMs: number): Promise<{ model: ModelStore; waits: LongPolls; looks: number[]; opensAt: number }> {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const opensAt = Date.now() + opensInMs;
    const looks: number[] = [];
    return { model, waits: new LongPolls(rateLimited(model, () => opensAt, looks), notifier), looks, opensAt };
  }

  it('a claim held by the rate limit is answered at retryAt, with one look there, not by polling', async () => {
    const { model, waits, looks, opensAt } = await setup(400);
    const { id } = await model.post(ref, { body: '{"n":1}', postedBy: 'p' });
    const holds: ClaimHolds = {};
    const claimed = await waits.claim(ref, { worker: 'w', waitMs: 5000, holds });
    expect(claimed?.id).to.equal(id);
    expect(Date.now()).to.be.at.least(opensAt);
    expect(Date.now() - opensAt).to.be.below(200);
    // The first look, and one at the window's opening: no polling in between.
    expect(looks.length).to.equal(2);
    expect(holds.first).to.equal('rateLimit');
    expect(holds.last).to.equal(undefined);
  });

  it('a claim whose wait ends before retryAt is answered empty when its wait ends, its last hold naming when to come back', async () => {
    const { model, waits, looks, opensAt } = await setup(2000);
    await model.post(ref, { body: '{"n":1}', postedBy: 'p' });
    const holds: ClaimHolds = {};
    const started = Date.now();
    expect(await waits.claimMany(ref, { worker: 'w', waitMs: 300, max: 5, holds })).to.deep.equal([]);
    expect(Date.now() - started).to.be.within(250, 1000);
    expect(looks.length).to.equal(1);
    expect(holds.last).to.deep.equal({ reason: 'rateLimit', retryAt: opensAt });
  });

  it('several held claims share one timer: each looks at retryAt, oldest first, and the one item goes to the oldest', async () => {
    const { model, waits, opensAt } = await setup(300);
    const { id } = await model.post(ref, { body: '{"n":1}', postedBy: 'p' });
    const first = waits.claim(ref, { worker: 'first', waitMs: 1500 });
    await new Promise((r) => setTimeout(r, 20));
    const second = waits.claim(ref, { worker: 'second', waitMs: 1500 });
    expect((await first)?.id).to.equal(id);
    expect(Date.now() - opensAt).to.be.below(200);
    expect(await second).to.equal(null);
  });
});
