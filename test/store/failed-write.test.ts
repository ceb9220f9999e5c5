import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { write } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { StoreUnavailable, type PayloadKind, type QueueRef, type StagedPayload } from '../../src/store/store.js';
import type { WriteFn } from '../../src/store/append-file.js';
import { openTools, type Tools } from '../../src/tools/index.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../src/waiting/notifier.js';
import { cleanupTemp, tempDir } from '../support/server.js';

const HOST = 'fail.example.com';

/**
 * The write system call with a switch: while `failing`, every write fails with ENOSPC, after
 * putting `partial` of its bytes on disk first (a write cut short by a full disk).
 */
class FaultyDisk {
  failing = false;
  partial = 0;
  failures = 0;
  readonly write: WriteFn = (fd, buffer, offset, length, position, callback) => {
    if (!this.failing || length === 0) return write(fd, buffer, offset, length, position, callback);
    this.failures++;
    const enospc = (): void => callback(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }), 0);
    if (this.partial === 0) return enospc();
    write(fd, buffer, offset, Math.min(this.partial, length), position, () => enospc());
  };
}

function ref(name: string, archivePayloads = false): QueueRef {
  return { key: `${HOST}/${name}`, host: HOST, name, config: resolveQueue({ 'svc-queue-archivePayloads': archivePayloads, leaseSeconds: 600 }) };
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected the promise to be rejected');
}

describe('the embedded store when a write fails (decisions §6: a failed write leaves no trace)', function () {
  this.timeout(30_000);
  let home: string;
  let tools: Tools;
  let store: EmbeddedStore;
  let disk: FaultyDisk;
  let waits: LongPolls;
  const warnings: string[] = [];
  /** The definitions the store knows, for what it applies on its own time (a queue without one is kept as it is). */
  const defined = new Map<string, QueueConfig>();

  /** Payload stagings that fail (ENOSPC), by the body staged; and a hold on discards, while set. */
  const failStaging = new Set<string>();
  let holdDiscards: Promise<void> | undefined;

  async function open(): Promise<void> {
    tools = await openTools({ home, statsInterval: 0, warn: (l) => warnings.push(l) });
    const notifier = new InProcessNotifier();
    const hooks = {
      stage: async (host: string, queue: string, id: string, kind: PayloadKind, body: string): Promise<StagedPayload> => {
        if (failStaging.has(body)) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
        const staged = await tools.hooks.stage(host, queue, id, kind, body);
        return { publish: () => staged.publish(), discard: async () => (await holdDiscards, await staged.discard()) };
      },
    };
    store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks, configFor: (key) => defined.get(key), warn: (l) => warnings.push(l), write: disk.write, notifier });
    await store.open();
    waits = new LongPolls(store, notifier);
    await tools.tasks.start(store);
  }
  async function close(): Promise<void> {
    await store.close();
    await tools.close();
  }
  function historyEvents(): Array<{ id: string; event: string }> {
    const dir = path.join(home, 'tasks');
    return readdirSync(dir)
      .flatMap((f) => readFileSync(path.join(dir, f), 'utf8').split('\n'))
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { id: string; event: string });
  }

  beforeEach(async () => {
    failStaging.clear();
    holdDiscards = undefined;
    home = tempDir();
    disk = new FaultyDisk();
    warnings.length = 0;
    await open();
  });
  afterEach(async () => {
    disk.failing = false;
    await close().catch(() => undefined);
    cleanupTemp(home);
  });

  it('a post whose write fails is refused with StoreUnavailable and is never claimed, fetched or in the history, before or after a restart (§6)', async () => {
    const q = ref('posts');
    const kept = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    disk.failing = true;
    const refused = await rejection(store.post(q, { body: '{"n":2}', postedBy: 'public', idempotencyKey: 'k2' }));
    expect(refused).to.be.instanceOf(StoreUnavailable);
    expect(refused.message).to.match(/disk is full/);
    disk.failing = false;

    // Space is back, no restart: only the acknowledged item exists.
    expect(await store.counts(q)).to.deep.equal({ pending: 1 });
    expect((await store.claim(q, { worker: 'w' }))?.id).to.equal(kept.id);
    expect(await store.claim(q, { worker: 'w' })).to.equal(null);
    // The idempotency key was not taken: the retry creates the item now.
    const retried = await store.post(q, { body: '{"n":2}', postedBy: 'public', idempotencyKey: 'k2' });
    expect(retried.created).to.equal(true);

    await close();
    await open();
    expect(await store.counts(q)).to.deep.equal({ claimed: 1, pending: 1 });
    const events = historyEvents();
    expect(events.filter((e) => e.event === 'posted').map((e) => e.id)).to.deep.equal([kept.id, retried.id]);
  });

  it('an error whose write fails leaves neither the failure nor its dead-letter copy, then or after a restart; a redrive whose write fails leaves the dead letter (decisions §6, §8.6)', async () => {
    const dl: QueueRef = { key: `${HOST}/dead`, host: HOST, name: 'dead', config: resolveQueue({}) };
    const q: QueueRef = { key: `${HOST}/failing`, host: HOST, name: 'failing', config: resolveQueue({ maxAttempts: 1, deadLetter: 'dead' }) };
    defined.set(dl.key, dl.config);
    defined.set(q.key, q.config);
    const a = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    await store.claim(q, { worker: 'w' });
    disk.failing = true;
    disk.partial = 40;
    expect(await rejection(store.error(q, a.id, '{"e":1}'))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    disk.partial = 0;
    const check = async (): Promise<void> => {
      const r = await store.get(q, a.id);
      expect(r?.status).to.equal('claimed');
      expect(r).to.not.have.property('deadLetterId');
      expect(await store.counts(dl)).to.deep.equal({});
    };
    await check();
    await close();
    await open();
    await check();
    expect(historyEvents().filter((e) => e.event === 'failed' || (e.event === 'posted' && e.id !== a.id))).to.deep.equal([]);

    // Written this time: both are there.
    expect(await store.error(q, a.id, '{"e":2}')).to.deep.equal({ accepted: true, status: 'failed' });
    const copy = (await store.get(q, a.id))!.deadLetterId!;
    expect((await store.get(dl, copy))?.source).to.deep.include({ id: a.id, error: '{"e":2}' });
    const redrive = { kind: 'redrive' as const, queueNamed: (name: string) => (name === q.name ? q : undefined) };
    disk.failing = true;
    expect(await rejection(store.bulk(dl, redrive, 10))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect((await store.get(dl, copy))?.status).to.equal('pending');
    expect(await store.counts(q)).to.deep.equal({ failed: 1 });
    await close();
    await open();
    expect((await store.get(dl, copy))?.status).to.equal('pending');
    expect(await store.counts(q)).to.deep.equal({ failed: 1 });
  });

  it('a claim waiting for an item is not woken by a post that failed, and is handed the next one that is written (§6)', async () => {
    const q = ref('waiting');
    let answered: unknown = 'not yet';
    const waiting = waits.claim(q, { worker: 'w', waitMs: 1500 }).then((c) => (answered = c));
    await new Promise((r) => setImmediate(r));
    disk.failing = true;
    const refused = await rejection(store.post(q, { body: '{"n":1}', postedBy: 'public' }));
    expect(refused).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    // Nothing was announced: the waiting claim is not woken for the item that was taken back, and ends empty.
    await new Promise((r) => setTimeout(r, 200));
    expect(answered).to.equal('not yet');
    expect(await waiting).to.equal(null);
    expect(await store.counts(q)).to.deep.equal({});
    // An item that is written wakes it.
    const later = waits.claim(q, { worker: 'w', waitMs: 5000 });
    const kept = await store.post(q, { body: '{"n":2}', postedBy: 'public' });
    expect((await later)?.id).to.equal(kept.id);
  });

  it('a claim, progress, result, error or cancel whose write fails takes no effect, then or after a restart (§6)', async () => {
    const q = ref('submissions');
    const a = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    const b = await store.post(q, { body: '{"n":2}', postedBy: 'public' });

    disk.failing = true;
    expect(await rejection(store.claim(q, { worker: 'w' }))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    // The failed claim left nothing leased: the oldest item is claimed next.
    const claimed = await store.claim(q, { worker: 'w' });
    expect(claimed?.id).to.equal(a.id);
    expect(claimed?.attempts).to.equal(1);

    disk.failing = true;
    for (const attempt of [
      store.progress(q, a.id, '{"percent":50}'),
      store.result(q, a.id, '{"output":"x"}'),
      store.error(q, a.id, '{"why":"x"}'),
      store.cancel(q, a.id),
      store.cancel(q, b.id),
    ]) {
      expect(await rejection(attempt)).to.be.instanceOf(StoreUnavailable);
    }
    disk.failing = false;

    const check = async (): Promise<void> => {
      const ra = await store.get(q, a.id);
      expect(ra).to.include({ status: 'claimed', attempts: 1, progress: null, result: null, error: null, finishedAt: null });
      expect((await store.get(q, b.id))?.status).to.equal('pending');
    };
    await check();
    // And what does get written later is the item as it really is.
    expect(await store.result(q, a.id, '{"output":"done"}')).to.deep.equal({ accepted: true, status: 'finished' });
    await close();
    await open();
    expect((await store.get(q, a.id))?.result).to.equal('{"output":"done"}');
    expect((await store.get(q, b.id))?.status).to.equal('pending');
    const events = historyEvents().filter((e) => e.id === a.id).map((e) => e.event);
    expect(events).to.deep.equal(['posted', 'claimed', 'finished']);
  });

  it('a pause or a resume whose write fails is refused and taken back: claims go on as before it, then and after a restart (§6, §8.4)', async () => {
    const q = ref('paused');
    const a = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    disk.failing = true;
    expect(await rejection(store.setPaused(q, true))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect((await store.overview(q, { oldest: 0, leases: 0 })).paused).to.equal(false);
    expect((await store.claim(q, { worker: 'w' }))?.id).to.equal(a.id);
    await store.setPaused(q, true);
    const b = await store.post(q, { body: '{"n":2}', postedBy: 'public' });
    disk.failing = true;
    expect(await rejection(store.setPaused(q, false))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect(await store.claim(q, { worker: 'w' })).to.equal(null);
    await close();
    await open();
    expect((await store.overview(q, { oldest: 0, leases: 0 })).paused).to.equal(true);
    expect(await store.claim(q, { worker: 'w' })).to.equal(null);
    await store.setPaused(q, false);
    expect((await store.claim(q, { worker: 'w' }))?.id).to.equal(b.id);
  });

  it('what a write cut short put on disk is never read back after a restart (§6)', async () => {
    const q = ref('partial');
    const kept = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    disk.failing = true;
    disk.partial = 1 << 20; // the whole group reaches the disk, and the call still reports ENOSPC
    const bodies = Array.from({ length: 20 }, (_, i) => `{"n":${i + 2}}`);
    const results = await Promise.allSettled(bodies.map((body) => store.post(q, { body, postedBy: 'public' })));
    expect(results.every((r) => r.status === 'rejected')).to.equal(true);
    disk.failing = false;
    // A shorter group written next lands where the failed one began; then the process dies (no clean close, which would cut the file).
    await store.post(q, { body: '{"n":"after"}', postedBy: 'public' });
    await tools.close();
    await open();
    expect(await store.counts(q)).to.deep.equal({ pending: 2 });
    expect((await store.claim(q, { worker: 'w' }))?.id).to.equal(kept.id);
    expect((await store.claim(q, { worker: 'w' }))?.item).to.equal('{"n":"after"}');
  });

  it('archives no payload for a change that could not be written, and archives it once it is (§5, §6)', async () => {
    const q = ref('archived', true);
    disk.failing = true;
    expect(await rejection(store.post(q, { body: '{"n":1}', postedBy: 'public' }))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    const dir = path.join(home, 'payloads', HOST, 'archived');
    const files = (): string[] => (existsSync(dir) ? readdirSync(dir) : []);
    expect(files()).to.deep.equal([]);

    const posted = await store.post(q, { body: '{"n":2}', postedBy: 'public' });
    await store.claim(q, { worker: 'w' });
    disk.failing = true;
    expect(await rejection(store.result(q, posted.id, '{"output":"lost"}'))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect(files()).to.deep.equal([`${posted.id}.item`]);
    await store.result(q, posted.id, '{"output":"kept"}');
    expect(files().sort()).to.deep.equal([`${posted.id}.item`, `${posted.id}.result`]);
    expect(readFileSync(path.join(dir, `${posted.id}.result`), 'utf8')).to.equal('{"output":"kept"}');
  });

  it('a batch whose payload cannot be staged is refused whole and leaves no staged file behind (§3.8, §6)', async () => {
    const q = ref('archived-batch', true);
    failStaging.add('{"n":"refused"}');
    const inputs = ['{"n":1}', '{"n":2}', '{"n":"refused"}', '{"n":4}'].map((body) => ({ body, postedBy: 'public' }));
    expect(await rejection(store.postMany(q, inputs))).to.be.instanceOf(StoreUnavailable);
    // Stagings still under way when the refusal came would leave their files a moment later.
    await new Promise((r) => setTimeout(r, 200));
    const dir = path.join(home, 'payloads', HOST, 'archived-batch');
    expect(existsSync(dir) ? readdirSync(dir) : []).to.deep.equal([]);
    expect(await store.claim(q, { worker: 'w' })).to.equal(null);
  });

  it('hand-ins whose payloads cannot all be staged are refused whole: none applied, none archived, then or after a restart (§3.8, §6)', async () => {
    const q = ref('archived-handin', true);
    const ids: string[] = [];
    for (let n = 0; n < 3; n++) ids.push((await store.post(q, { body: `{"n":${n}}`, postedBy: 'public' })).id);
    for (let n = 0; n < 3; n++) await store.claim(q, { worker: 'w' });
    failStaging.add('{"output":"refused"}');
    const entries = [
      { id: ids[0]!, kind: 'result' as const, body: '{"output":"first"}' },
      { id: ids[1]!, kind: 'error' as const, body: '{"reason":"second"}' },
      { id: ids[2]!, kind: 'result' as const, body: '{"output":"refused"}' },
    ];
    expect(await rejection(store.submitMany(q, entries))).to.be.instanceOf(StoreUnavailable);
    const dir = path.join(home, 'payloads', HOST, 'archived-handin');
    const payloads = (): string[] => readdirSync(dir).filter((f) => !f.endsWith('.item')).sort();
    expect(payloads()).to.deep.equal([]);
    const statuses = async (): Promise<string[]> => Promise.all(ids.map(async (id) => (await store.get(q, id))!.status));
    expect(await statuses()).to.deep.equal(['claimed', 'claimed', 'claimed']);
    await close();
    await open();
    expect(await statuses()).to.deep.equal(['claimed', 'claimed', 'claimed']);

    // Once every payload can be written, all are applied in one go and archived.
    failStaging.clear();
    const outcomes = await store.submitMany(q, entries);
    expect(outcomes.map((o) => o?.accepted)).to.deep.equal([true, true, true]);
    expect(payloads()).to.deep.equal([`${ids[0]}.result`, `${ids[1]}.error`, `${ids[2]}.result`].sort());
    expect(readFileSync(path.join(dir, `${ids[2]}.result`), 'utf8')).to.equal('{"output":"refused"}');
  });

  it('a batch that finds an item already posted under its key journals its new items before another request can claim them (§3.5, §6)', async () => {
    const q = ref('archived-keys', true);
    await store.postMany(q, [{ body: '{"n":0}', postedBy: 'public', idempotencyKey: 'K:0' }]);
    expect((await store.claim(q, { worker: 'first' }))?.item).to.equal('{"n":0}');
    // The batch is sent again with one more item; the staged payload of the one already posted is
    // discarded, and that discard is held while another request asks for an item.
    let release: () => void = () => {};
    holdDiscards = new Promise((resolve) => (release = resolve));
    const again = store.postMany(q, [
      { body: '{"n":0}', postedBy: 'public', idempotencyKey: 'K:0' },
      { body: '{"n":1}', postedBy: 'public', idempotencyKey: 'K:1' },
    ]);
    let claimed: Awaited<ReturnType<EmbeddedStore['claim']>> = null;
    for (let i = 0; i < 50 && !claimed; i++) {
      await new Promise((r) => setTimeout(r, 2));
      claimed = await store.claim(q, { worker: 'second' });
    }
    release();
    const outcomes = await again;
    expect(outcomes.map((o) => o.created)).to.deep.equal([false, true]);
    expect(claimed?.id).to.equal(outcomes[1]!.id);
    // After a restart, the claim acknowledged above is still there: its record came after the post's.
    await close();
    await open();
    const record = await store.get(q, outcomes[1]!.id);
    expect(record?.status).to.equal('claimed');
    expect(record?.attempts).to.equal(1);
  });

  it('time-driven changes that cannot be written are taken back and tried again, not in a loop (§3.2, §6)', async () => {
    const q: QueueRef = { ...ref('lease'), config: resolveQueue({ leaseSeconds: 1, maxAttempts: 3 }) };
    defined.set(q.key, q.config);
    const a = await store.post(q, { body: '{"n":1}', postedBy: 'public' });
    await store.claim(q, { worker: 'w' });
    disk.failing = true;
    await new Promise((r) => setTimeout(r, 1600));
    const failuresWhileFull = disk.failures;
    // The lease ended while the disk was full: re-queueing it was tried, taken back, and retried about once a second.
    expect(failuresWhileFull).to.be.within(1, 4);
    expect((await store.get(q, a.id))?.status).to.equal('claimed');
    disk.failing = false;
    await new Promise((r) => setTimeout(r, 1200));
    expect((await store.get(q, a.id))?.status).to.equal('pending');
  });

  it('a result whose write fails owes no callback, then or after a restart; a settle whose write fails leaves the callback owed as it was (decisions §6, §9.2)', async () => {
    const q: QueueRef = { ...ref('callbacks'), config: resolveQueue({ leaseSeconds: 600, callback: 'http://127.0.0.1:9/hook' }) };
    defined.set(q.key, q.config);
    const a = await store.post(q, { body: '{"n":1}', postedBy: 'p' });
    await store.claim(q, { worker: 'w' });
    disk.failing = true;
    expect(await rejection(store.result(q, a.id, '{}'))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect(await store.takeCallbacks(10, 60_000)).to.deep.equal([]);
    expect((await store.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 0, failing: 0 });
    await close();
    await open();
    expect(await store.takeCallbacks(10, 60_000)).to.deep.equal([]);
    expect((await store.get(q, a.id))?.status).to.equal('claimed');

    await store.result(q, a.id, '{}');
    const [taken] = await store.takeCallbacks(10, 60_000);
    expect(taken).to.deep.include({ itemId: a.id, event: 'finished', tries: 0 });
    disk.failing = true;
    expect(await rejection(store.settleCallback(taken!, { delivered: true }))).to.be.instanceOf(StoreUnavailable);
    disk.failing = false;
    expect((await store.overview(q, { oldest: 0, leases: 0 })).callbacks).to.deep.equal({ owed: 1, failing: 0 });
    await close();
    await open();
    const [again] = await store.takeCallbacks(10, 60_000);
    expect(again).to.deep.include({ id: taken!.id, itemId: a.id, tries: 0 });
  });
});
