import { readdirSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { openTools, type Tools } from '../../src/tools/index.js';
import { tempDirEachTest } from '../support/server.js';

const HOST = 'pause.example.com';
const config = resolveQueue({ leaseSeconds: 600 });

function ref(name: string): QueueRef {
  return { key: `${HOST}/${name}`, host: HOST, name, config };
}

/**
 * The embedded store keeps a pause in its journal, and in the snapshot that replaces older
 * journals (decisions §6, §8.4); the conformance suite covers the rest on every store.
 */
describe('the embedded store keeps pauses across snapshots (decisions §6, §8.4)', function () {
  this.timeout(30_000);
  let home: string;
  tempDirEachTest((made) => (home = made));

  async function opened(): Promise<{ store: EmbeddedStore; tools: Tools; close: () => Promise<void> }> {
    const tools = await openTools({ home, statsInterval: 0, warn: () => undefined });
    const store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: () => config, warn: () => undefined, compactBytes: 4096 });
    await store.open();
    await tools.tasks.start(store);
    return { store, tools, close: async () => (await store.close(), await tools.close()) };
  }

  it('a queue paused (with items or none) and one resumed come back as they were from a snapshot, once the journals that said so are gone', async () => {
    const storeDir = path.join(home, 'store');
    let { store, close } = await opened();
    const held = ref('held');
    const empty = ref('empty');
    const resumed = ref('resumed');
    const busy = ref('busy');
    const kept = await store.post(held, { body: '{"kept":true}', postedBy: 'p' });
    await store.setPaused(held, true);
    await store.setPaused(empty, true);
    await store.setPaused(resumed, true);
    await store.setPaused(resumed, false);
    // Enough journal for a snapshot (4 KiB): the records of the pauses are in the journal it replaces.
    const snapshots = (): string[] => readdirSync(storeDir).filter((f) => /^snapshot-\d+\.jsonl$/.test(f));
    for (let i = 0; snapshots().length === 0 || readdirSync(storeDir).some((f) => f === 'journal-0.jsonl'); i++) {
      if (i > 2000) throw new Error('no snapshot was written');
      await store.post(busy, { body: JSON.stringify({ i, pad: 'x'.repeat(100) }), postedBy: 'p' });
    }
    await close();
    ({ store, close } = await opened());
    try {
      expect((await store.overview(held, { oldest: 0, leases: 0 })).paused).to.equal(true);
      expect((await store.overview(empty, { oldest: 0, leases: 0 })).paused).to.equal(true);
      expect((await store.overview(resumed, { oldest: 0, leases: 0 })).paused).to.equal(false);
      expect(await store.claim(held, { worker: 'w' })).to.equal(null);
      await store.setPaused(held, false);
      expect((await store.claim(held, { worker: 'w' }))?.id).to.equal(kept.id);
    } finally {
      await close();
    }
  });
});
