import { readdirSync, write } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import type { ClaimHold } from '../../src/engine/limits.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { WriteFn } from '../../src/store/append-file.js';
import type { QueueRef } from '../../src/store/store.js';
import { openTools, type Tools } from '../../src/tools/index.js';
import { tempDirEachTest } from '../support/server.js';
import { FakeClock } from './support/stores.js';

const HOST = 'limits.example.com';

/**
 * The embedded store keeps the rate window and the turns of decisions §8.5 in its journal, in the
 * snapshot that replaces older journals, and takes a lease's count back with a write that failed
 * (decisions §6); the conformance suite covers the rest on every store.
 */
describe('the embedded store keeps rate windows and turns across snapshots and failed writes (decisions §6, §8.5)', function () {
  this.timeout(30_000);
  let home: string;
  tempDirEachTest((made) => (home = made));
  const clock = new FakeClock();
  const configs = new Map<string, QueueConfig>();
  let failing = false;
  const faulty: WriteFn = (fd, buffer, offset, length, position, callback) => {
    if (!failing || length === 0) return write(fd, buffer, offset, length, position, callback);
    callback(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }), 0);
  };

  function ref(name: string, def: Parameters<typeof resolveQueue>[0]): QueueRef {
    const config = resolveQueue({ leaseSeconds: 600, ...def });
    configs.set(`${HOST}/${name}`, config);
    return { key: `${HOST}/${name}`, host: HOST, name, config };
  }

  async function opened(): Promise<{ store: EmbeddedStore; tools: Tools; close: () => Promise<void> }> {
    const tools = await openTools({ home, statsInterval: 0, warn: () => undefined });
    const store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: (key) => configs.get(key), warn: () => undefined, compactBytes: 4096, now: clock.now, write: faulty });
    await store.open();
    await tools.tasks.start(store);
    return { store, tools, close: async () => (await store.close(), await tools.close()) };
  }

  async function claimed(store: EmbeddedStore, q: QueueRef, held?: ClaimHold): Promise<string | null> {
    return (await store.claim(q, { worker: 'w', held }))?.id ?? null;
  }

  it('the turns and the rate window come back from a snapshot once the journals that held the claims are gone', async () => {
    const storeDir = path.join(home, 'store');
    let { store, close } = await opened();
    const fair = ref('fair', { fairness: 'groups' });
    const rated = ref('rated', { rateLimit: { max: 2, perSeconds: 60 } });
    const busy = ref('busy', {});
    const ids: string[] = [];
    for (const group of ['a', 'b', 'b', 'a']) ids.push((await store.post(fair, { body: '{}', postedBy: 'p', options: { group } })).id);
    expect(await claimed(store, fair)).to.equal(ids[0]);
    expect(await claimed(store, fair)).to.equal(ids[1]);
    const r1 = (await store.post(rated, { body: '{}', postedBy: 'p' })).id;
    const r2 = (await store.post(rated, { body: '{}', postedBy: 'p' })).id;
    const r3 = (await store.post(rated, { body: '{}', postedBy: 'p' })).id;
    const t0 = clock.now();
    expect(await claimed(store, rated)).to.equal(r1);
    expect(await claimed(store, rated)).to.equal(r2);
    // Both leases finish: the window still counts them.
    await store.result(rated, r1, '{}');
    await store.result(rated, r2, '{}');
    const snapshots = (): string[] => readdirSync(storeDir).filter((f) => /^snapshot-\d+\.jsonl$/.test(f));
    for (let i = 0; snapshots().length === 0 || readdirSync(storeDir).some((f) => f === 'journal-0.jsonl'); i++) {
      if (i > 2000) throw new Error('no snapshot was written');
      await store.post(busy, { body: JSON.stringify({ i, pad: 'x'.repeat(100) }), postedBy: 'p' });
    }
    await close();
    ({ store, close } = await opened());
    try {
      // a was served before b: its turn, though b's item is older.
      expect(await claimed(store, fair)).to.equal(ids[3]);
      expect(await claimed(store, fair)).to.equal(ids[2]);
      const held: ClaimHold = {};
      expect(await claimed(store, rated, held)).to.equal(null);
      expect(held).to.deep.equal({ reason: 'rateLimit', retryAt: t0 + 60_000 });
      clock.advance(60_000);
      expect(await claimed(store, rated)).to.equal(r3);
    } finally {
      await close();
    }
  });

  it('a claim whose write fails is taken back with its place in the rate window and its turn', async () => {
    let { store, close } = await opened();
    const q = ref('taken-back', { fairness: 'groups', rateLimit: { max: 1, perSeconds: 60 } });
    const a = (await store.post(q, { body: '{}', postedBy: 'p', options: { group: 'a' } })).id;
    const b = (await store.post(q, { body: '{}', postedBy: 'p', options: { group: 'b' } })).id;
    failing = true;
    const refused = await store.claim(q, { worker: 'w' }).then(
      () => null,
      (err: Error) => err,
    );
    failing = false;
    expect(refused?.message).to.match(/could not save/);
    // Neither the window nor a's turn kept the lease that never was.
    expect(await claimed(store, q)).to.equal(a);
    await close();
    ({ store, close } = await opened());
    try {
      clock.advance(60_000);
      expect(await claimed(store, q)).to.equal(b);
    } finally {
      await close();
    }
  });
});
