import { readdirSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { openTools, type Tools } from '../../src/tools/index.js';
import { tempDirEachTest } from '../support/server.js';

const HOST = 'dead.example.com';
const configs = new Map<string, QueueConfig>([
  [`${HOST}/dl`, resolveQueue({ leaseSeconds: 600 })],
  [`${HOST}/q`, resolveQueue({ leaseSeconds: 600, maxAttempts: 1, deadLetter: 'dl' })],
  [`${HOST}/busy`, resolveQueue({})],
]);

function ref(name: string): QueueRef {
  return { key: `${HOST}/${name}`, host: HOST, name, config: configs.get(`${HOST}/${name}`)! };
}

/**
 * The embedded store keeps an item's dead-letter links in its snapshot as in its journal
 * (decisions §6, §8.6); the conformance suite covers the rest on every store.
 */
describe('the embedded store keeps dead-letter links across snapshots (decisions §6, §8.6)', function () {
  this.timeout(30_000);
  let home: string;
  tempDirEachTest((made) => (home = made));

  async function opened(): Promise<{ store: EmbeddedStore; tools: Tools; close: () => Promise<void> }> {
    const tools = await openTools({ home, statsInterval: 0, warn: () => undefined });
    const store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: (key) => configs.get(key), warn: () => undefined, compactBytes: 4096 });
    await store.open();
    await tools.tasks.start(store);
    return { store, tools, close: async () => (await store.close(), await tools.close()) };
  }

  it('a failed item names its copy, and the copy its source, when both come back from a snapshot once the journals that said so are gone', async () => {
    const storeDir = path.join(home, 'store');
    let { store, close } = await opened();
    const q = ref('q');
    const dl = ref('dl');
    const { id } = await store.post(q, { body: '{"job":1}', postedBy: 'p' });
    await store.claim(q, { worker: 'w' });
    await store.error(q, id, '{"e":"x\\ty"}');
    const failed = await store.get(q, id);
    const copy = await store.get(dl, failed!.deadLetterId!);
    expect(copy?.source).to.deep.equal({ queue: 'q', id, status: 'failed', attempts: 1, error: '{"e":"x\\ty"}' });
    const snapshots = (): string[] => readdirSync(storeDir).filter((f) => /^snapshot-\d+\.jsonl$/.test(f));
    for (let i = 0; snapshots().length === 0 || readdirSync(storeDir).some((f) => f === 'journal-0.jsonl'); i++) {
      if (i > 2000) throw new Error('no snapshot was written');
      await store.post(ref('busy'), { body: JSON.stringify({ i, pad: 'x'.repeat(100) }), postedBy: 'p' });
    }
    await close();
    ({ store, close } = await opened());
    try {
      expect(await store.get(q, id)).to.deep.equal(failed);
      expect(await store.get(dl, failed!.deadLetterId!)).to.deep.equal(copy);
    } finally {
      await close();
    }
  });
});
