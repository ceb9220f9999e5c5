import { expect } from 'chai';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import type { TaskEvent } from '../../src/engine/item.js';
import { LEASE_EXPIRED } from '../../src/engine/rules.js';
import { BULK_BATCH, type BulkAction, type QueueRef, type StatusRecord, type Store } from '../../src/store/store.js';
import type { StoreUnderTest } from './support/stores.js';

/** What the conformance suite hands the dead-letter tests: its store under test and its helpers. */
export interface DeadLetterSuite {
  h(): StoreUnderTest;
  /** A new queue with these rules, known to the store's configFor. */
  queue(def?: QueueDefinition): QueueRef;
  post(q: QueueRef, body?: object): Promise<string>;
  claimId(q: QueueRef): Promise<string | null>;
  advance(ms: number): void;
}

/**
 * decisions §8.6 for every store: dead-letter copies made in the same atomic step as the failure,
 * and the bulk actions redrive, retry and cancel, in batches.
 */
export function deadLetterConformance(t: DeadLetterSuite): void {
  describe('dead letters and bulk actions (decisions §8.6)', () => {
    const s = (): Store => t.h().store;
    const made = new Map<string, QueueRef>();
    function queue(def: QueueDefinition = {}): QueueRef {
      const q = t.queue(def);
      made.set(q.name, q);
      return q;
    }
    /** A queue and its dead-letter queue. */
    function pair(def: QueueDefinition = {}): { q: QueueRef; dl: QueueRef } {
      const dl = queue();
      return { q: queue({ maxAttempts: 1, ...def, deadLetter: dl.name }), dl };
    }
    const redrive: BulkAction = { kind: 'redrive', queueNamed: (name) => made.get(name) };
    async function get(q: QueueRef, id: string): Promise<StatusRecord> {
      const r = await s().get(q, id);
      expect(r, `item ${id} of ${q.name}`).to.not.equal(null);
      return r!;
    }
    /** The copy of a failed item: its record, once the original names it. */
    async function copyOf(q: QueueRef, dl: QueueRef, id: string): Promise<StatusRecord> {
      const original = await get(q, id);
      expect(original.deadLetterId, 'deadLetterId').to.be.a('string');
      return get(dl, original.deadLetterId!);
    }
    async function events(): Promise<TaskEvent[] | undefined> {
      return t.h().events?.();
    }
    async function failOne(q: QueueRef, body: object = { job: 1 }, error = '{"e":1}'): Promise<string> {
      const id = await t.post(q, body);
      expect(await t.claimId(q)).to.equal(id);
      expect(await s().error(q, id, error)).to.deep.equal({ accepted: true, status: 'failed' });
      return id;
    }

    it('an error that uses up the last attempt copies the item to the deadLetter queue, which names its source; the original names the copy', async () => {
      const { q, dl } = pair();
      const id = await failOne(q, { job: 'a' }, '{"why":"broken"}');
      const copy = await copyOf(q, dl, id);
      expect(copy).to.deep.include({ status: 'pending', postedBy: 'dead-letter', attempts: 0, priority: 0, group: null, error: null });
      expect(copy.source).to.deep.equal({ queue: q.name, id, status: 'failed', attempts: 1, error: '{"why":"broken"}' });
      expect(copy.deadLetterId).to.equal(undefined);
      const claimed = await s().claim(dl, { worker: 'w' });
      expect(claimed?.id).to.equal(copy.id);
      expect(JSON.parse(claimed!.item)).to.deep.equal({ job: 'a' });
      expect(await s().counts(dl)).to.deep.equal({ claimed: 1 });
    });

    it('an item re-queued with attempts left makes no copy; a worker that says final (decisions §8.2) makes one at once', async () => {
      const { q, dl } = pair({ maxAttempts: 3 });
      const id = await t.post(q);
      await t.claimId(q);
      expect(await s().error(q, id, '{}')).to.deep.equal({ accepted: true, status: 'pending' });
      expect((await get(q, id)).deadLetterId).to.equal(undefined);
      expect(await s().counts(dl)).to.deep.equal({});
      await t.claimId(q);
      expect(await s().error(q, id, '{"no":"more"}', { final: true })).to.deep.equal({ accepted: true, status: 'failed' });
      const copy = await copyOf(q, dl, id);
      expect(copy.source).to.deep.equal({ queue: q.name, id, status: 'failed', attempts: 2, error: '{"no":"more"}' });
    });

    it('errors handed in together (decisions §3.8) each make their copy', async () => {
      const { q, dl } = pair();
      const a = await t.post(q, { n: 1 });
      const b = await t.post(q, { n: 2 });
      await t.claimId(q);
      await t.claimId(q);
      const out = await Promise.all([s().error(q, a, '{"n":1}'), s().error(q, b, '{"n":2}')]);
      expect(out.map((o) => o?.status)).to.deep.equal(['failed', 'failed']);
      expect((await copyOf(q, dl, a)).source?.error).to.equal('{"n":1}');
      expect((await copyOf(q, dl, b)).source?.error).to.equal('{"n":2}');
      expect(await s().counts(dl)).to.deep.equal({ pending: 2 });
    });

    it('a lease that ends with no attempt left makes a copy with the lease-expired error', async () => {
      const { q, dl } = pair({ leaseSeconds: 10 });
      const id = await t.post(q);
      await t.claimId(q);
      t.advance(10_001);
      await t.h().settle?.();
      expect((await get(q, id)).status).to.equal('failed');
      const copy = await copyOf(q, dl, id);
      expect(copy.source).to.deep.equal({ queue: q.name, id, status: 'failed', attempts: 1, error: LEASE_EXPIRED });
    });

    it('a fetch that itself applies the failure (a lease ended on the last attempt) already names the copy', async () => {
      const { q, dl } = pair({ leaseSeconds: 10 });
      const id = await t.post(q);
      await t.claimId(q);
      t.advance(10_001);
      const r = await get(q, id);
      expect(r.status).to.equal('failed');
      expect(r.deadLetterId).to.be.a('string');
      expect((await get(dl, r.deadLetterId!)).source?.id).to.equal(id);
    });

    it('a timeout makes a copy of the timed-out item', async () => {
      const { q, dl } = pair({ timeoutSeconds: 5 });
      const id = await t.post(q, { slow: true });
      t.advance(5_001);
      await t.h().settle?.();
      expect((await get(q, id)).status).to.equal('timedout');
      const copy = await copyOf(q, dl, id);
      expect(copy.source).to.deep.equal({ queue: q.name, id, status: 'timedout', attempts: 0, error: null });
    });

    it('a deadLetter queue that is not defined gets no copy, and the failed event says deadLetter "undefined"', async () => {
      const q = queue({ maxAttempts: 1, deadLetter: 'nowhere' });
      const id = await failOne(q);
      const r = await get(q, id);
      expect(r.status).to.equal('failed');
      expect(r).to.not.have.property('deadLetterId');
      const all = await events();
      if (all) expect(all.find((e) => e.id === id && e.event === 'failed')?.deadLetter).to.equal('undefined');
    });

    it('the failure event names the copy, and the copy has its posted event', async () => {
      const { q, dl } = pair();
      const id = await failOne(q);
      const copy = await copyOf(q, dl, id);
      const all = await events();
      if (!all) return;
      expect(all.find((e) => e.id === id && e.event === 'failed')).to.deep.include({ queue: q.name, deadLetter: copy.id, status: 'failed' });
      expect(all.find((e) => e.id === copy.id && e.event === 'posted')).to.deep.include({ queue: dl.name, status: 'pending' });
    });

    it('the copy and both links survive a restart', async () => {
      const { q, dl } = pair();
      const id = await failOne(q);
      const before = await copyOf(q, dl, id);
      await t.h().reopen();
      const after = await copyOf(q, dl, id);
      expect(after).to.deep.equal(before);
      expect(await s().counts(dl)).to.deep.equal({ pending: 1 });
    });

    it('redrive posts pending dead letters back to their queue (postedBy redrive) and removes them, oldest first, in batches', async () => {
      const { q, dl } = pair();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await failOne(q, { i }));
      const copies = await Promise.all(ids.map(async (id) => (await get(q, id)).deadLetterId!));
      expect(await s().bulk(dl, redrive, 2)).to.deep.equal({ changed: 2, more: true });
      expect(await s().get(dl, copies[0]!)).to.equal(null);
      expect(await s().get(dl, copies[1]!)).to.equal(null);
      expect((await get(dl, copies[2]!)).status).to.equal('pending');
      expect(await s().counts(q)).to.deep.equal({ failed: 3, pending: 2 });
      const first = await s().claim(q, { worker: 'w' });
      expect(JSON.parse(first!.item)).to.deep.equal({ i: 0 });
      expect((await get(q, first!.id)).postedBy).to.equal('redrive');
      expect(await s().bulk(dl, redrive, 2)).to.deep.equal({ changed: 1, more: false });
      expect(await s().counts(dl)).to.deep.equal({});
      expect(await s().bulk(dl, redrive, 2)).to.deep.equal({ changed: 0, more: false });
      const all = await events();
      if (all) {
        const moved = all.find((e) => e.id === copies[0] && e.event === 'redriven');
        expect(moved?.redrivenTo).to.equal(`${q.name}/${first!.id}`);
      }
    });

    it('redrive leaves a dead letter whose queue is not defined now where it is, and other items alone', async () => {
      const { q, dl } = pair();
      const id = await failOne(q);
      const copy = (await get(q, id)).deadLetterId!;
      const plain = await t.post(dl, { plain: true });
      expect(await s().bulk(dl, { kind: 'redrive', queueNamed: () => undefined }, 10)).to.deep.equal({ changed: 0, more: false });
      expect((await get(dl, copy)).status).to.equal('pending');
      expect(await s().bulk(dl, redrive, 10)).to.deep.equal({ changed: 1, more: false });
      expect((await get(dl, plain)).status).to.equal('pending');
      expect(await s().get(dl, copy)).to.equal(null);
    });

    it('redrive survives a restart: the dead letter stays gone, the new item stays', async () => {
      const { q, dl } = pair();
      const id = await failOne(q);
      const copy = (await get(q, id)).deadLetterId!;
      await s().bulk(dl, redrive, 10);
      await t.h().reopen();
      expect(await s().get(dl, copy)).to.equal(null);
      expect(await s().counts(q)).to.deep.equal({ failed: 1, pending: 1 });
    });

    it('retry makes failed, timed-out or cancelled items pending again in place, attempts 0, claimable at once; only the statuses asked for', async () => {
      const q = queue({ maxAttempts: 1, timeoutSeconds: 100 });
      const failed = await failOne(q);
      const cancelled = await t.post(q);
      await s().cancel(q, cancelled);
      const finished = await t.post(q);
      await t.claimId(q);
      await s().result(q, finished, '{}');
      expect(await s().bulk(q, { kind: 'retry', statuses: ['failed'] }, 10)).to.deep.equal({ changed: 1, more: false });
      const r = await get(q, failed);
      expect(r).to.deep.include({ status: 'pending', attempts: 0, finishedAt: null, runAt: null });
      expect((await get(q, cancelled)).status).to.equal('cancelled');
      expect(await t.claimId(q)).to.equal(failed);
      expect(await s().bulk(q, { kind: 'retry', statuses: ['failed', 'timedout', 'cancelled'] }, 10)).to.deep.equal({ changed: 1, more: false });
      expect((await get(q, cancelled)).status).to.equal('pending');
      expect((await get(q, finished)).status).to.equal('finished');
      const all = await events();
      if (all) expect(all.filter((e) => e.event === 'retried').map((e) => e.id)).to.deep.equal([failed, cancelled]);
    });

    it('retry takes the oldest first (claim order) and says whether more are left', async () => {
      const q = queue({ maxAttempts: 1 });
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await failOne(q, { i }));
      expect(await s().bulk(q, { kind: 'retry', statuses: ['failed'] }, 1)).to.deep.equal({ changed: 1, more: true });
      expect((await get(q, ids[0]!)).status).to.equal('pending');
      expect((await get(q, ids[1]!)).status).to.equal('failed');
      expect(await s().bulk(q, { kind: 'retry', statuses: ['failed'] }, 2)).to.deep.equal({ changed: 2, more: false });
      expect(await s().counts(q)).to.deep.equal({ pending: 3 });
    });

    it('a retried item that fails again is copied again', async () => {
      const { q, dl } = pair();
      const id = await failOne(q);
      const first = (await get(q, id)).deadLetterId!;
      await s().bulk(q, { kind: 'retry', statuses: ['failed'] }, 10);
      await t.claimId(q);
      await s().error(q, id, '{"again":true}');
      const second = (await get(q, id)).deadLetterId!;
      expect(second).to.not.equal(first);
      expect(await s().counts(dl)).to.deep.equal({ pending: 2 });
    });

    it('a retried item whose timeout (counted from postedAt) has passed times out in the same step, and is copied again there', async () => {
      const { q, dl } = pair({ timeoutSeconds: 25 });
      const id = await failOne(q);
      const first = (await get(q, id)).deadLetterId!;
      t.advance(25_000);
      expect(await s().bulk(q, { kind: 'retry', statuses: ['failed'] }, 10)).to.deep.equal({ changed: 1, more: false });
      // Read-only calls from here: what the retry made due was applied by the retry itself.
      expect(await s().counts(dl)).to.deep.equal({ pending: 2 });
      const again = await get(q, id);
      expect(again.status).to.equal('timedout');
      expect(again.deadLetterId).to.not.equal(first);
    });

    it('deadlines that passed together are applied in the order they fell, not the order of the items: a lease that ended before a timeout is copied first', async () => {
      const { q, dl } = pair({ leaseSeconds: 5, timeoutSeconds: 20 });
      const early = await t.post(q, { n: 1 });
      const late = await t.post(q, { n: 2 });
      // The later item's lease ends at 5 s; the earlier item (pending) times out at 20 s.
      expect(await s().claim(q, { worker: 'w', criteria: { n: 2 } })).to.include({ id: late });
      t.advance(20_000);
      await t.h().settle?.();
      expect((await get(q, early)).status).to.equal('timedout');
      const copies = (await s().overview(dl, { oldest: 10, leases: 0 })).oldest.map((o) => o.id);
      expect(copies).to.have.length(2);
      expect((await get(dl, copies[0]!)).source).to.include({ id: late, status: 'failed' });
      expect((await get(dl, copies[1]!)).source).to.include({ id: early, status: 'timedout' });
    });

    it('cancel cancels pending, claimed or processing items of the statuses asked for; a cancelled lease ends', async () => {
      const q = queue();
      const a = await t.post(q);
      const b = await t.post(q);
      const c = await t.post(q);
      await t.claimId(q);
      await t.claimId(q);
      await s().progress(q, b, '{}');
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['pending'] }, 10)).to.deep.equal({ changed: 1, more: false });
      expect((await get(q, c)).status).to.equal('cancelled');
      expect((await get(q, a)).status).to.equal('claimed');
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['claimed', 'processing'] }, 1)).to.deep.equal({ changed: 1, more: true });
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['claimed', 'processing'] }, 1)).to.deep.equal({ changed: 1, more: false });
      expect(await s().counts(q)).to.deep.equal({ cancelled: 3 });
      // A worker's result for a cancelled item is not accepted (decisions §3.6).
      expect(await s().result(q, a, '{}')).to.deep.equal({ accepted: false, status: 'cancelled' });
      const o = await s().overview(q, { oldest: 10, leases: 10 });
      expect(o.leases).to.deep.equal([]);
    });

    it(`a batch changes at most ${BULK_BATCH} items, oldest first, and says more are left`, async () => {
      const q = queue();
      const ids = (await s().postMany(q, Array.from({ length: BULK_BATCH + 1 }, (_, i) => ({ body: `{"i":${i}}`, postedBy: 'producer' })))).map((o) => o.id);
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['pending'] }, BULK_BATCH)).to.deep.equal({ changed: BULK_BATCH, more: true });
      expect(await s().counts(q)).to.deep.equal({ cancelled: BULK_BATCH, pending: 1 });
      expect((await get(q, ids[BULK_BATCH]!)).status).to.equal('pending');
      expect(await s().bulk(q, { kind: 'retry', statuses: ['cancelled'] }, BULK_BATCH)).to.deep.equal({ changed: BULK_BATCH, more: false });
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['pending'] }, BULK_BATCH)).to.deep.equal({ changed: BULK_BATCH, more: true });
      expect(await s().bulk(q, { kind: 'cancel', statuses: ['pending'] }, BULK_BATCH)).to.deep.equal({ changed: 1, more: false });
      expect(await s().counts(q)).to.deep.equal({ cancelled: BULK_BATCH + 1 });
    });

    it(`redrive moves a batch of ${BULK_BATCH} dead letters at once`, async () => {
      const { q, dl } = pair({ timeoutSeconds: 1 });
      await s().postMany(q, Array.from({ length: BULK_BATCH + 2 }, (_, i) => ({ body: `{"i":${i}}`, postedBy: 'producer' })));
      t.advance(1_001);
      await t.h().settle?.();
      expect(await s().counts(q)).to.deep.equal({ timedout: BULK_BATCH + 2 });
      expect(await s().counts(dl)).to.deep.equal({ pending: BULK_BATCH + 2 });
      const back = queue();
      const onlyBack: BulkAction = { kind: 'redrive', queueNamed: (name) => (name === q.name ? back : undefined) };
      expect(await s().bulk(dl, onlyBack, BULK_BATCH)).to.deep.equal({ changed: BULK_BATCH, more: true });
      expect(await s().counts(back)).to.deep.equal({ pending: BULK_BATCH });
      expect(await s().bulk(dl, onlyBack, BULK_BATCH)).to.deep.equal({ changed: 2, more: false });
      expect(await s().counts(dl)).to.deep.equal({});
    });
  });
}
