import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue } from '../../src/engine/config.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { QueueRef } from '../../src/store/store.js';
import { tempDirEachTest } from '../support/server.js';

const HOST = 'events.example.com';

describe('task events of a claim whose hand-ins name one item twice (decisions §3.8, §5)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

  it('each event carries the status and attempts its own change left, in the history and again after a restart', async () => {
    const q: QueueRef = { key: `${HOST}/jobs`, host: HOST, name: 'jobs', config: resolveQueue({ maxAttempts: 3, leaseSeconds: 600 }) };
    const open = async (): Promise<EmbeddedStore> => {
      const store = new EmbeddedStore({ dir: path.join(dir, 'store'), hooks: { stage: () => Promise.reject(new Error('no payloads here')) }, configFor: () => q.config, warn: () => undefined });
      await store.open();
      return store;
    };
    const events = (store: EmbeddedStore): Array<[string, string, number]> =>
      store
        .readEvents(0, 100)
        .flatMap((entry) => entry.lines.join('').split('\n').filter(Boolean))
        .map((line) => JSON.parse(line) as { event: string; status: string; attempts: number })
        .map((e) => [e.event, e.status, e.attempts]);

    let store = await open();
    const { id } = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    await store.claim(q, { worker: 'w' });
    // Applied in order, as the error and result endpoints would: re-queued (pending), then finished.
    const outcomes = await store.submitMany(q, [
      { id, kind: 'error', body: '{"reason":"first try"}' },
      { id, kind: 'result', body: '{"output":"done"}' },
    ]);
    expect(outcomes.map((o) => o?.status)).to.deep.equal(['pending', 'finished']);
    const expected: Array<[string, string, number]> = [
      ['posted', 'pending', 0],
      ['claimed', 'claimed', 1],
      ['error', 'pending', 1],
      ['requeued', 'pending', 1],
      ['finished', 'finished', 1],
    ];
    expect(events(store)).to.deep.equal(expected);

    // The journal holds the same events: a restart hands the history the same lines.
    await store.close();
    store = await open();
    try {
      expect(events(store)).to.deep.equal(expected);
    } finally {
      await store.close();
    }
  });
});

describe('task events of hand-ins with a deadline falling between them (decisions §2.2, §3.8, §5)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

  it('a deadline that falls between two hand-ins is journalled after the hand-ins before it: an item\'s purge follows its finish (decisions §2.2, §3.8, §5)', async () => {
    const q: QueueRef = { key: `${HOST}/brief`, host: HOST, name: 'brief', config: resolveQueue({ retainSeconds: 0 }) };
    const store = new EmbeddedStore({ dir: path.join(dir, 'store'), hooks: { stage: () => Promise.reject(new Error('no payloads here')) }, configFor: () => q.config, warn: () => undefined, now: () => 1_700_000_000_000 });
    await store.open();
    try {
      const x = (await store.post(q, { body: '{"n":1}', postedBy: 'public' })).id;
      const y = (await store.post(q, { body: '{"n":2}', postedBy: 'public' })).id;
      const outcomes = await store.submitMany(q, [
        { id: x, kind: 'result', body: '{}' },
        { id: y, kind: 'result', body: '{}' },
      ]);
      expect(outcomes.map((o) => o?.status)).to.deep.equal(['finished', 'finished']);
      const history = store
        .readEvents(0, 100)
        .flatMap((entry) => entry.lines.join('').split('\n').filter(Boolean))
        .map((line) => JSON.parse(line) as { id: string; event: string })
        .filter((e) => e.event !== 'posted')
        .map((e) => [e.id === x ? 'x' : 'y', e.event]);
      // Each is purged once finished (retainSeconds 0): x before the hand-in of y is applied, y
      // by the commit that finished it, not left for a timer or a later request.
      expect(history).to.deep.equal([
        ['x', 'finished'],
        ['x', 'purged'],
        ['y', 'finished'],
        ['y', 'purged'],
      ]);
    } finally {
      await store.close();
    }
  });
});
