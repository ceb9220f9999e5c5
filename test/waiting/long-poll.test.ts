import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { ModelStore, newModelDisk } from '../../src/store/model-store.js';
import { StoreUnavailable, type Store } from '../../src/store/store.js';
import { LongPolls, QueueWithdrawn } from '../../src/waiting/long-poll.js';
import { InProcessNotifier, type Notifier } from '../../src/waiting/notifier.js';

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

/** A model store on an in-process notifier, and long polls above it whose claims each take `ms`. */
async function slowLongPolls(ms: number): Promise<{ model: ModelStore; waits: LongPolls }> {
  const notifier = new InProcessNotifier();
  const model = new ModelStore(newModelDisk(), { notifier });
  await model.open();
  return { model, waits: new LongPolls(slowClaims(model, ms), notifier) };
}

/** `inner`, counting the subscriptions not yet ended. */
function counting(inner: Notifier): { notifier: Notifier; live: () => number } {
  let live = 0;
  const notifier: Notifier = {
    notify: (topic) => inner.notify(topic),
    subscribe: (topic, listener) => {
      live++;
      const off = inner.subscribe(topic, listener);
      let ended = false;
      return () => {
        if (!ended) live--;
        ended = true;
        off();
      };
    },
  };
  return { notifier, live: () => live };
}

describe('long polls above the store (decisions §3.3 wait)', function () {
  this.timeout(10_000);

  it('a wait counts from when it began (the request\'s arrival), not from after the looks a slow store makes first', async () => {
    const { model, waits } = await slowLongPolls(300);
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
    const { model, waits } = await slowLongPolls(200);
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
    const { model, waits } = await slowLongPolls(200);
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

  it('a claim whose queue is withdrawn while its first look is at the store ends with the wall once that look is back, not after its wait (decisions §2.4)', async () => {
    const { model, waits } = await slowLongPolls(300);
    let defined = true;
    const started = Date.now();
    const held = waits.claimMany(ref, { worker: 'w', waitMs: 3000, current: () => (defined ? ref : undefined) }).then(
      () => 'answered',
      (err: unknown) => err,
    );
    // The definition goes during the look: its change is told (definitionsChanged) before the claim waits.
    await new Promise((resolve) => setTimeout(resolve, 100));
    defined = false;
    waits.definitionsChanged(ref.host);
    expect(await held).to.be.instanceOf(QueueWithdrawn);
    expect(Date.now() - started).to.be.below(1500);
    await model.close();
  });

  it('a held claim whose time runs out while a look is under way answers with what that look claimed: an item is never leased to an answer that says empty (decisions §3.3)', async () => {
    const { model, waits } = await slowLongPolls(300);
    // First look 0–300 ms finds nothing; the post at 400 ms wakes a look (400–700 ms); the wait ends at 500 ms.
    const held = waits.claim(ref, { worker: 'w', waitMs: 500 });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const { id } = await model.post(ref, { body: '{}', postedBy: 'p' });
    const claimed = await held;
    const record = await model.get(ref, id);
    expect(claimed?.id, `answered ${JSON.stringify(claimed)}, the item is ${record?.status}`).to.equal(id);
    await model.close();
  });

  it('a claim and a fetch that waited leave no subscription and no definition lookup behind once answered (decisions §3.3, §3.6)', async () => {
    const inner = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier: inner });
    await model.open();
    const { notifier, live } = counting(inner);
    const waits = new LongPolls(model, notifier);
    let lookups = 0;
    const current = (): typeof ref => {
      lookups++;
      return ref;
    };
    const claim = waits.claimMany(ref, { worker: 'w', waitMs: 2000, current });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const { id } = await model.post(ref, { body: '{}', postedBy: 'p' });
    expect((await claim).map((c) => c.id)).to.deep.equal([id]);
    const fetched = waits.get(ref, id, 2000, undefined, current);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await model.result(ref, id, '{}');
    expect((await fetched)?.status).to.equal('finished');
    expect(live(), 'subscriptions left').to.equal(0);
    // A definition change later is no business of requests already answered.
    lookups = 0;
    waits.definitionsChanged(ref.host);
    expect(lookups, 'lookups after the answers').to.equal(0);
    await model.close();
  });

  it('a claim whose queue is withdrawn while a look is under way is answered after that look: what it claimed is handed over, never leased to a wall (decisions §2.4, §3.3)', async () => {
    const { model, waits } = await slowLongPolls(300);
    let defined = true;
    // First look 0–300 ms finds nothing; the post at 400 ms wakes a look (400–700 ms); the queue goes at 500 ms.
    const held = waits.claim(ref, { worker: 'w', waitMs: 3000, current: () => (defined ? ref : undefined) }).then(
      (claimed) => claimed?.id,
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    const { id } = await model.post(ref, { body: '{}', postedBy: 'p' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    defined = false;
    waits.definitionsChanged(ref.host);
    const answer = await held;
    await new Promise((resolve) => setTimeout(resolve, 400));
    const status = (await model.get(ref, id))?.status;
    if (answer instanceof QueueWithdrawn) expect(status, 'an item claimed for a claim answered with the wall').to.equal('pending');
    else expect(answer).to.equal(id);
    await model.close();
  });

  it('a held claim makes one look at a time: items announced during its look are left for others, none claimed for an answer already given (interface §4.2 rule 2)', async () => {
    const { model, waits } = await slowLongPolls(300);
    // First look 0–300 ms finds nothing; the post at 400 ms wakes a look (400–700 ms); another item comes at 500 ms.
    const held = waits.claim(ref, { worker: 'w', waitMs: 3000 });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const first = await model.post(ref, { body: '{"n":1}', postedBy: 'p' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const second = await model.post(ref, { body: '{"n":2}', postedBy: 'p' });
    expect((await held)?.id).to.equal(first.id);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await model.get(ref, second.id))?.status).to.equal('pending');
    await model.close();
  });

  it('a held claim whose queue is withdrawn during a look that finds nothing ends with the wall once the look is back, not after its wait (decisions §2.4)', async () => {
    const { model, waits } = await slowLongPolls(300);
    let defined = true;
    const started = Date.now();
    // First look 0–300 ms; an item it does not match wakes a look at 400 ms (400–700 ms); the queue goes at 500 ms.
    const held = waits.claim(ref, { worker: 'w', waitMs: 3000, criteria: { kind: 'b' }, current: () => (defined ? ref : undefined) }).then(
      () => 'answered',
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    await model.post(ref, { body: '{"kind":"a"}', postedBy: 'p' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    defined = false;
    waits.definitionsChanged(ref.host);
    expect(await held).to.be.instanceOf(QueueWithdrawn);
    expect(Date.now() - started).to.be.below(1500);
    await model.close();
  });

  it('a held claim whose time runs out during a look that finds nothing is answered empty once the look is back (decisions §3.3)', async () => {
    const { model, waits } = await slowLongPolls(300);
    const started = Date.now();
    // First look 0–300 ms; an item it does not match wakes a look at 350 ms (350–650 ms); the wait ends at 500 ms.
    const held = waits.claim(ref, { worker: 'w', waitMs: 500, criteria: { kind: 'b' } });
    await new Promise((resolve) => setTimeout(resolve, 350));
    await model.post(ref, { body: '{"kind":"a"}', postedBy: 'p' });
    const answer = await Promise.race([held, new Promise((resolve) => setTimeout(() => resolve('still held'), 2000))]);
    expect(answer).to.equal(null);
    expect(Date.now() - started).to.be.below(1500);
    await model.close();
  });

  it('a held fetch whose item ends while the store looks it up looks again at once, not after its wait (decisions §3.6)', async () => {
    const notifier = new InProcessNotifier();
    const model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const { id } = await model.post(ref, { body: '{}', postedBy: 'p' });
    // Each look reads the item at once and answers 300 ms later: what it answers may be out of date by then.
    const store = new Proxy(model, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver) as unknown;
        if (key === 'get') {
          return async (...args: unknown[]) => {
            const record = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            await new Promise((resolve) => setTimeout(resolve, 300));
            return record;
          };
        }
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }) as unknown as Store;
    const waits = new LongPolls(store, notifier);
    const started = Date.now();
    // The first look reads the item pending and answers at 300 ms; the item is cancelled at 100 ms.
    const held = waits.get(ref, id, 3000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await model.cancel(ref, id);
    expect((await held)?.status).to.equal('cancelled');
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
