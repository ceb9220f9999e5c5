import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { ModelStore, newModelDisk } from '../../src/store/model-store.js';
import { StoreUnavailable, type Store } from '../../src/store/store.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../src/waiting/notifier.js';

const ref = { key: 'wait.example.com/q', host: 'wait.example.com', name: 'q', config: resolveQueue({}) };

/** The reference store, with every claim taking `ms` longer: a store whose looks are slow (criteria over a long backlog). */
function slowClaims(store: ModelStore, ms: number): Store {
  const later = <T>(p: Promise<T>): Promise<T> => new Promise((resolve) => setTimeout(resolve, ms)).then(() => p);
  return new Proxy(store, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (key === 'claim' || key === 'claimMany') return (...args: unknown[]) => later((value as (...a: unknown[]) => Promise<unknown>).apply(target, args));
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  }) as unknown as Store;
}

describe('long polls above the store (decisions §3.3 wait)', function () {
  this.timeout(10_000);

  it('a wait counts from when it began (the request\'s arrival), not from after the looks a slow store makes first', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const waits = new LongPolls(slowClaims(model, 300), notifier);
    // The request arrived 300 ms ago (its first look took that long); it asked to wait 800 ms.
    const since = Date.now() - 300;
    const started = Date.now();
    expect(await waits.claimMany(ref, { worker: 'w', waitMs: 800, since })).to.deep.equal([]);
    const took = Date.now() - started;
    // 500 ms were left of the wait; the look made inside it takes 300 of them. Counted from after
    // that look, it would end 800 ms later: 1,100 ms.
    expect(took).to.be.at.least(450).and.below(900);
    await model.close();
  });

  it('a held claim whose look after a wake-up cannot be written gets that failure (a 503), not an empty answer (decisions §6)', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    let looks = 0;
    const failing = new Proxy(model, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver) as unknown;
        if (key === 'claim') return () => (++looks > 1 ? Promise.reject(new StoreUnavailable(new Error('disk full'))) : Promise.resolve(null));
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }) as unknown as Store;
    const waits = new LongPolls(failing, notifier);
    const held = waits.claim(ref, { worker: 'w', waitMs: 2000 }).then(
      () => 'answered',
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    await model.post(ref, { body: '{}', postedBy: 'p' });
    expect(await held).to.be.instanceOf(StoreUnavailable);
    await model.close();
  });

  it('an item posted while the first look is under way is claimed by another look at once, not after the wait (decisions §3.3)', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const waits = new LongPolls(slowClaims(model, 200), notifier);
    const started = Date.now();
    const held = waits.claim(ref, { worker: 'w', waitMs: 3000 });
    // The first look has found nothing; its answer is on its way.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const { id } = await model.post(ref, { body: '{}', postedBy: 'p' });
    expect((await held)?.id).to.equal(id);
    expect(Date.now() - started).to.be.below(1500);
    await model.close();
  });

  it('a held claim that was looking when a matching item came looks again once that look is back, not after the wait (decisions §3.3)', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const waits = new LongPolls(slowClaims(model, 200), notifier);
    const started = Date.now();
    const held = waits.claim(ref, { worker: 'w', waitMs: 3000, criteria: { kind: 'b' } });
    // After the first look (200 ms) the claim waits; an item it does not match wakes it for a look of 200 ms…
    await new Promise((resolve) => setTimeout(resolve, 300));
    await model.post(ref, { body: '{"kind":"a"}', postedBy: 'p' });
    // …and one it matches comes while that look is under way.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const { id } = await model.post(ref, { body: '{"kind":"b"}', postedBy: 'p' });
    expect((await held)?.id).to.equal(id);
    expect(Date.now() - started).to.be.below(1500);
    await model.close();
  });

  it('a wait already over when it would begin answers after one look, without waiting', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const waits = new LongPolls(model, notifier);
    const started = Date.now();
    expect(await waits.claimMany(ref, { worker: 'w', waitMs: 1000, since: Date.now() - 2000 })).to.deep.equal([]);
    expect(Date.now() - started).to.be.below(200);
    await model.close();
  });
});
