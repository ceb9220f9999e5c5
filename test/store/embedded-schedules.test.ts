import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { payloadsDir } from '../../src/tools/files.js';
import { openTools, type Tools } from '../../src/tools/index.js';
import { payloadFile } from '../../src/tools/payload-archive.js';
import { tempDirEachTest } from '../support/server.js';

const HOST = 'schedules.example.com';
const config = resolveQueue({ leaseSeconds: 600, schedules: { beat: { every: 10, item: { beat: true } } } });
const plain = resolveQueue({ leaseSeconds: 600 });
const archived = resolveQueue({ leaseSeconds: 600, 'svc-queue-archivePayloads': true, schedules: { beat: { every: 10, item: { beat: 'kept' } } } });
const START = 1_700_000_000_000;

/**
 * The embedded store keeps each schedule's state in its journal, written in the same group as the
 * items the occurrence posted, and in the snapshot that replaces older journals (decisions §6,
 * §8.3); the conformance suite covers the rest on every store.
 */
describe('the embedded store keeps schedules across snapshots (decisions §6, §8.3)', function () {
  this.timeout(30_000);
  let home: string;
  let t = START;
  tempDirEachTest((made) => (home = made));

  async function opened(): Promise<{ store: EmbeddedStore; tools: Tools; close: () => Promise<void> }> {
    const tools = await openTools({ home, statsInterval: 0, warn: () => undefined });
    const store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: (key) => (key.endsWith('/beats') ? config : key.endsWith('/archived') ? archived : plain), warn: () => undefined, compactBytes: 4096, now: () => t });
    await store.open();
    await tools.tasks.start(store);
    return { store, tools, close: async () => (await store.close(), await tools.close()) };
  }

  it('a schedule\'s last occurrence comes back from a snapshot, once the journals that said so are gone: no occurrence is posted twice', async () => {
    const storeDir = path.join(home, 'store');
    let { store, close } = await opened();
    const beats: QueueRef = { key: `${HOST}/beats`, host: HOST, name: 'beats', config };
    const busy: QueueRef = { key: `${HOST}/busy`, host: HOST, name: 'busy', config: plain };
    await store.tickSchedules(beats);
    t += 10_000;
    expect(await store.tickSchedules(beats)).to.equal(1);
    const snapshots = (): string[] => readdirSync(storeDir).filter((f) => /^snapshot-\d+\.jsonl$/.test(f));
    for (let i = 0; snapshots().length === 0 || readdirSync(storeDir).some((f) => f === 'journal-0.jsonl'); i++) {
      if (i > 2000) throw new Error('no snapshot was written');
      await store.post(busy, { body: JSON.stringify({ i, pad: 'x'.repeat(100) }), postedBy: 'p' });
    }
    const before = await store.schedules(beats);
    await close();
    ({ store, close } = await opened());
    try {
      expect(await store.schedules(beats)).to.deep.equal(before);
      expect(before[0]).to.deep.include({ last: START + 10_000 });
      expect(await store.tickSchedules(beats)).to.equal(0);
      t += 10_000;
      expect(await store.tickSchedules(beats)).to.equal(1);
      expect((await store.counts(beats)).pending).to.equal(2);
    } finally {
      await close();
    }
  });

  it('the item an occurrence posts on a queue that archives payloads has its body archived, as a post does (decisions §5, §8.3)', async () => {
    const { store, close } = await opened();
    try {
      const q: QueueRef = { key: `${HOST}/archived`, host: HOST, name: 'archived', config: archived };
      await store.tickSchedules(q);
      t += 10_000;
      expect(await store.tickSchedules(q)).to.equal(1);
      const id = (await store.schedules(q))[0]!.lastId!;
      expect(readFileSync(payloadFile(payloadsDir(home), HOST, 'archived', id, 'item'), 'utf8')).to.equal('{"beat":"kept"}');
      // Nothing staged is left beside it.
      expect(readdirSync(path.dirname(payloadFile(payloadsDir(home), HOST, 'archived', id, 'item')))).to.deep.equal([`${id}.item`]);
    } finally {
      await close();
    }
  });
});
