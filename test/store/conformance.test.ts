import { expect } from 'chai';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import type { Criteria } from '../../src/engine/criteria.js';
import { LEASE_EXPIRED, retryDelay, type PostOptions, type RetryWish } from '../../src/engine/rules.js';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import type { QueueRef, Store, SubmitOutcome } from '../../src/store/store.js';
import { deadLetterConformance } from './conformance-dead-letters.js';
import { callbackConformance } from './conformance-callbacks.js';
import { droppedAll, embedded, model, START, type StoreFactory, type StoreUnderTest } from './support/stores.js';
import { limitsConformance } from './conformance-limits.js';

/**
 * One suite for every store (STYLE: a store is proved by the conformance suite). Each test names
 * the rule it checks. Time is a fake clock that only `advance` moves; durability tests close the
 * store and open a new one on the same data between steps.
 */

const HOST = 'conformance.example.com';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Where a store is known to differ from the contract, by test tag, and why: those tests show as
 * pending for that store (and say why), so that the difference stays visible until it is fixed.
 */
type KnownDifferences = Partial<Record<'counts-deadlines', string>>;

function conformance(name: string, factory: StoreFactory | null, whyNot?: string, known: KnownDifferences = {}): void {
  describe(`conformance: ${name}`, function () {
    this.timeout(30_000);
    let h: StoreUnderTest;
    const configs = new Map<string, QueueConfig>();
    let queues = 0;

    if (factory === null) {
      before(function () {
        console.log(`    skipped: ${whyNot}`);
        this.skip();
      });
    } else {
      beforeEach(async () => {
        h = await factory({ configFor: (key) => configs.get(key) });
      });
      afterEach(async () => {
        await h.dispose();
      });
      // The PostgreSQL store's databases are dropped while the next tests run.
      after(() => droppedAll());
    }

    const s = (): Store => h.store;
    function knownDifference(test: Mocha.Context, tag: keyof KnownDifferences): void {
      const why = known[tag];
      if (why === undefined) return;
      console.log(`      known difference (${tag}): ${why}`);
      test.skip();
    }
    const now = (): number => h.clock.now();
    const advance = (ms: number): void => h.clock.advance(ms);

    /** A new queue with these rules (leases of 30 s unless said otherwise). */
    function queue(def: QueueDefinition = {}): QueueRef {
      const qname = `q${++queues}`;
      return redefine({ key: `${HOST}/${qname}`, host: HOST, name: qname, config: resolveQueue({}) }, def);
    }
    /** The same queue under a new definition (a PUT): the next request carries it. */
    function redefine(q: QueueRef, def: QueueDefinition): QueueRef {
      const config = resolveQueue({ leaseSeconds: 30, ...def });
      configs.set(q.key, config);
      return { ...q, config };
    }
    async function post(q: QueueRef, body: object = {}, idempotencyKey?: string): Promise<string> {
      return (await s().post(q, { body: JSON.stringify(body), postedBy: 'producer', idempotencyKey })).id;
    }
    async function claimId(q: QueueRef, criteria?: Criteria, worker = 'w1'): Promise<string | null> {
      return (await s().claim(q, { worker, criteria }))?.id ?? null;
    }
    async function status(q: QueueRef, id: string): Promise<string | null> {
      return (await s().get(q, id))?.status ?? null;
    }
    /** Posts each body to a fresh queue and claims with `criteria`: the index of the body claimed, or -1. */
    async function firstMatch(bodies: object[], criteria: Criteria): Promise<number> {
      const q = queue();
      const ids: string[] = [];
      for (const body of bodies) ids.push(await post(q, body));
      const id = await claimId(q, criteria);
      return id === null ? -1 : ids.indexOf(id);
    }

    /** A queue of one attempt holding five items: one failed, one processing, one cancelled, two pending. */
    async function mixedQueue(): Promise<QueueRef> {
      const q = queue({ maxAttempts: 1 });
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push(await post(q, { i }));
      await claimId(q);
      await claimId(q);
      await s().progress(q, ids[1]!, '{}');
      await s().error(q, ids[0]!, '{}');
      await s().cancel(q, ids[2]!);
      return q;
    }

    describe('posting', () => {
      it('a posted item is pending with no attempts, and its record says who posted it and when (interface §2.1, decisions §3.1)', async () => {
        const q = queue();
        const out = await s().post(q, { body: '{"n":1}', postedBy: 'alice' });
        expect(out).to.deep.include({ status: 'pending', created: true });
        const record = await s().get(q, out.id);
        expect(record).to.deep.equal({ id: out.id, status: 'pending', postedBy: 'alice', postedAt: START, updatedAt: START, finishedAt: null, attempts: 0, priority: 0, group: null, runAt: null, progress: null, result: null, error: null });
      });

      it('ids are 16 lowercase hex characters, unique in the queue (decisions §3.5)', async () => {
        const q = queue();
        const ids = new Set<string>();
        for (let i = 0; i < 50; i++) ids.add(await post(q, { i }));
        expect(ids.size).to.equal(50);
        for (const id of ids) expect(id).to.match(/^[0-9a-f]{16}$/);
      });

      it('an id the queue does not hold gives null to get, progress, result, error and cancel (decisions §3.7)', async () => {
        const q = queue();
        const other = queue();
        const id = await post(other);
        for (const unknown of ['0123456789abcdef', id]) {
          expect(await s().get(q, unknown)).to.equal(null);
          expect(await s().progress(q, unknown, '{}')).to.equal(null);
          expect(await s().result(q, unknown, '{}')).to.equal(null);
          expect(await s().error(q, unknown, '{}')).to.equal(null);
          expect(await s().cancel(q, unknown)).to.equal(null);
        }
        expect(await s().counts(q)).to.deep.equal({});
      });

      it('counts the queue by status (decisions §3.1, §5.1)', async () => {
        const q = queue({ maxAttempts: 1 });
        const ids: string[] = [];
        for (let i = 0; i < 7; i++) ids.push(await post(q, { i }));
        for (let i = 0; i < 4; i++) await claimId(q);
        await s().progress(q, ids[1]!, '{"percent":10}');
        await s().result(q, ids[2]!, '{}');
        await s().error(q, ids[3]!, '{}');
        await s().cancel(q, ids[4]!);
        expect(await s().counts(q)).to.deep.equal({ claimed: 1, processing: 1, finished: 1, failed: 1, cancelled: 1, pending: 2 });
        expect(await s().counts(queue())).to.deep.equal({});
      });

      it('counts apply the deadlines already past, as every other request does (decisions §3.2, §5.1)', async function () {
        knownDifference(this, 'counts-deadlines');
        const q = queue({ leaseSeconds: 10, retainSeconds: 10, timeoutSeconds: 1000 });
        const a = await post(q);
        const b = await post(q);
        await post(q);
        await claimId(q);
        await s().result(q, b, '{}');
        advance(10_000);
        expect(await s().counts(q)).to.deep.equal({ pending: 2 });
        expect(await status(q, a)).to.equal('pending');
        advance(990_000);
        expect(await s().counts(q)).to.deep.equal({ timedout: 2 });
      });
    });

    describe('claim', () => {
      it('claims the oldest pending item first, also among items posted in the same millisecond (interface §4.2 rule 1)', async () => {
        const q = queue();
        const ids = [await post(q, { n: 1 }), await post(q, { n: 2 })];
        advance(1);
        ids.push(await post(q, { n: 3 }));
        expect([await claimId(q), await claimId(q), await claimId(q)]).to.deep.equal(ids);
      });

      it('a claim takes one more attempt and leases the item to the worker until now + leaseSeconds (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 45 });
        const id = await post(q, { job: 'x' });
        advance(7);
        const claimed = await s().claim(q, { worker: 'worker-7' });
        expect(claimed).to.deep.equal({ id, item: '{"job":"x"}', attempts: 1, lease: { worker: 'worker-7', until: START + 7 + 45_000 } });
        expect(await s().get(q, id)).to.deep.include({ status: 'claimed', attempts: 1, updatedAt: START + 7, postedAt: START });
      });

      it('gives the item exactly as posted (interface §2.1)', async () => {
        const q = queue();
        const body = '{ "b": [1, 2.50, "\\u00e9"],\n "a": null }';
        await s().post(q, { body, postedBy: 'p' });
        expect((await s().claim(q, { worker: 'w' }))?.item).to.equal(body);
      });

      it('answers null when nothing is pending, and never hands out a claimed item again (interface §4.2 rule 2)', async () => {
        const q = queue();
        expect(await claimId(q)).to.equal(null);
        const id = await post(q);
        expect(await claimId(q)).to.equal(id);
        expect(await claimId(q)).to.equal(null);
        expect(await claimId(q, {})).to.equal(null);
      });

      it('a claim with criteria takes the oldest matching item; older items it skipped stay pending and first in line (decisions §3.3)', async () => {
        const q = queue();
        const a = await post(q, { kind: 'a' });
        const b = await post(q, { kind: 'b' });
        const b2 = await post(q, { kind: 'b' });
        expect(await claimId(q, { kind: 'b' })).to.equal(b);
        expect(await status(q, a)).to.equal('pending');
        expect(await claimId(q)).to.equal(a);
        expect(await claimId(q, { kind: 'b' })).to.equal(b2);
      });

      it('items re-queued after a criteria claim passed over the queue are taken by the next such claim oldest first (interface §4.2 rule 1, decisions §3.2, §3.3)', async () => {
        const q = queue({ maxAttempts: 3 });
        const y = await post(q, { k: 'a' });
        const x = await post(q, { k: 'a' });
        await post(q, { k: 'b' });
        expect(await claimId(q)).to.equal(y);
        expect(await claimId(q)).to.equal(x);
        // Looks at everything pending (the b) and finds no match.
        expect(await claimId(q, { k: 'a' })).to.equal(null);
        // Re-queued younger first: the older one is still first in line.
        await s().error(q, x, '{}');
        await s().error(q, y, '{}');
        expect(await claimId(q, { k: 'a' })).to.equal(y);
        expect(await claimId(q, { k: 'a' })).to.equal(x);
      });

      it('deep equality of objects and arrays: the same keys, and an array is never an object (decisions §3.3)', async () => {
        const bodies = [{ o: { k: 1 } }, { o: { k: 1, j: 2 } }, { x: { 0: 1 } }, { x: [1] }];
        expect(await firstMatch(bodies, { o: { eq: { k: 1, j: 2 } } })).to.equal(1);
        expect(await firstMatch(bodies.slice(0, 1), { o: { eq: { k: 1, j: 2 } } })).to.equal(-1);
        expect(await firstMatch(bodies.slice(1, 2), { o: { eq: { k: 1 } } })).to.equal(-1);
        expect(await firstMatch(bodies.slice(0, 1), { o: { ne: { k: 1, j: 2 } } })).to.equal(0);
        expect(await firstMatch(bodies, { x: [1] })).to.equal(3);
        expect(await firstMatch(bodies.slice(2, 3), { x: [1] })).to.equal(-1);
        expect(await firstMatch(bodies.slice(3), { x: { eq: { 0: 1 } } })).to.equal(-1);
      });

      it('a claim whose criteria match nothing answers null and changes nothing (decisions §3.3)', async () => {
        const q = queue();
        const id = await post(q, { kind: 'a' });
        expect(await claimId(q, { kind: 'b' })).to.equal(null);
        expect(await s().get(q, id)).to.deep.include({ status: 'pending', attempts: 0 });
        expect(await claimId(q, {})).to.equal(id);
      });

      it('a bare primitive matches by strict equality: same JSON type and value (decisions §3.3)', async () => {
        const bodies = [{ v: '1' }, { v: true }, { v: 1 }, { v: null }, { v: 0 }];
        expect(await firstMatch(bodies, { v: 1 })).to.equal(2);
        expect(await firstMatch(bodies, { v: '1' })).to.equal(0);
        expect(await firstMatch(bodies, { v: true })).to.equal(1);
        expect(await firstMatch(bodies, { v: null })).to.equal(3);
        expect(await firstMatch(bodies, { v: false })).to.equal(-1);
      });

      it('a bare array matches by deep equality; a bare object is an operator object (decisions §3.3)', async () => {
        const bodies = [{ a: [1, 2, 3] }, { a: [2, 1] }, { a: [1, 2] }, { a: { x: 1 } }];
        expect(await firstMatch(bodies, { a: [1, 2] })).to.equal(2);
        expect(await firstMatch(bodies.slice(2), { a: [1, 2, 3] })).to.equal(-1);
        expect(await firstMatch(bodies.slice(2), { a: { in: [[1, 2, 3], [1]] } })).to.equal(-1);
        expect(await firstMatch(bodies, { a: [] })).to.equal(-1);
        expect(await firstMatch(bodies, { a: { x: 1 } })).to.equal(-1);
        expect(await firstMatch(bodies, { a: { eq: { x: 1 } } })).to.equal(3);
      });

      it('eq is bare equality and ne needs the field present and not equal (decisions §3.3)', async () => {
        const bodies = [{}, { k: 1 }, { k: '2' }, { k: 2 }];
        expect(await firstMatch(bodies, { k: { eq: 2 } })).to.equal(3);
        expect(await firstMatch(bodies, { k: { eq: '2' } })).to.equal(2);
        expect(await firstMatch(bodies, { k: { ne: 1 } })).to.equal(2);
        expect(await firstMatch(bodies, { k: { ne: '2' } })).to.equal(1);
        expect(await firstMatch(bodies.slice(2), { k: { ne: null } })).to.equal(0);
        expect(await firstMatch([{ k: true }, { k: false }], { k: { ne: true } })).to.equal(1);
        expect(await firstMatch([{}, { j: 1 }], { k: { ne: 1 } })).to.equal(-1);
      });

      it('lt, lte, gt and gte compare two numbers, boundaries included or not (decisions §3.3)', async () => {
        const five = [{ n: 5 }];
        expect(await firstMatch(five, { n: { lt: 5 } })).to.equal(-1);
        expect(await firstMatch(five, { n: { lte: 5 } })).to.equal(0);
        expect(await firstMatch(five, { n: { gt: 5 } })).to.equal(-1);
        expect(await firstMatch(five, { n: { gte: 5 } })).to.equal(0);
        expect(await firstMatch(five, { n: { lt: 5.5 } })).to.equal(0);
        expect(await firstMatch(five, { n: { gt: -1 } })).to.equal(0);
        expect(await firstMatch([{ n: 9 }, { n: 3 }, { n: 4 }], { n: { lt: 4 } })).to.equal(1);
      });

      it('strings compare by UTF-16 code unit order (decisions §3.3)', async () => {
        // U+1F600 is the surrogate pair D83D DE00: below U+FF5E by code units, above it by code points.
        expect(await firstMatch([{ s: '\u{1F600}' }], { s: { lt: '\uFF5E' } })).to.equal(0);
        expect(await firstMatch([{ s: '\u{1F600}' }], { s: { gt: '\uFF5E' } })).to.equal(-1);
        expect(await firstMatch([{ s: 'a' }], { s: { gt: 'B' } })).to.equal(0);
        expect(await firstMatch([{ s: 'abc' }], { s: { gt: 'ab' } })).to.equal(0);
        expect(await firstMatch([{ s: 'b' }], { s: { lte: 'b' } })).to.equal(0);
        expect(await firstMatch([{ s: 'b' }], { s: { lt: 'b' } })).to.equal(-1);
      });

      it('a comparison of anything but two numbers or two strings fails closed (decisions §3.3)', async () => {
        expect(await firstMatch([{ n: '5' }], { n: { lt: 6 } })).to.equal(-1);
        expect(await firstMatch([{ n: 5 }], { n: { lt: '6' } })).to.equal(-1);
        expect(await firstMatch([{ n: true }], { n: { gt: false } })).to.equal(-1);
        expect(await firstMatch([{ n: null }], { n: { lte: null } })).to.equal(-1);
        expect(await firstMatch([{ n: [1] }], { n: { gte: [0] } })).to.equal(-1);
      });

      it('in needs an array and matches strict-equal membership (decisions §3.3)', async () => {
        const bodies = [{ t: '1' }, { t: 1 }, { t: [1] }];
        expect(await firstMatch(bodies, { t: { in: [1, 2] } })).to.equal(1);
        expect(await firstMatch(bodies, { t: { in: [[1]] } })).to.equal(2);
        expect(await firstMatch(bodies, { t: { in: [] } })).to.equal(-1);
        expect(await firstMatch(bodies, { t: { in: 1 } })).to.equal(-1);
        expect(await firstMatch(bodies, { t: { in: '1' } })).to.equal(-1);
      });

      it('a missing field, an unknown operator or an operator object with several keys fails closed (decisions §3.3)', async () => {
        expect(await firstMatch([{ a: 1 }], { b: { ne: 5 } })).to.equal(-1);
        expect(await firstMatch([{ a: 1 }], { b: null })).to.equal(-1);
        expect(await firstMatch([{ a: 1 }], { a: { like: 1 } })).to.equal(-1);
        expect(await firstMatch([{ a: 5 }], { a: { gt: 1, lt: 10 } })).to.equal(-1);
        expect(await firstMatch([{ a: 5 }], { a: {} })).to.equal(-1);
      });

      it('an item must pass every criterion; empty criteria match every item (decisions §3.3)', async () => {
        const bodies = [{ a: 1, b: 1 }, { a: 1, b: 2 }, { a: 2, b: 2 }];
        expect(await firstMatch(bodies, { a: 1, b: 2 })).to.equal(1);
        expect(await firstMatch(bodies, { a: { gte: 2 }, b: { in: [2] } })).to.equal(2);
        expect(await firstMatch(bodies, { a: 1, b: 3 })).to.equal(-1);
        expect(await firstMatch(bodies, {})).to.equal(0);
      });

      it('criteria match bodies as JSON.parse reads them: escapes, characters outside the BMP, lone surrogates, duplicate keys, huge numbers and deep nesting (decisions §3.3)', async () => {
        /** Posts raw bodies (exact text) to a fresh queue, claims with `criteria`: the index claimed, or -1. */
        const firstRaw = async (bodies: string[], criteria: Criteria): Promise<number> => {
          const q = queue();
          const ids: string[] = [];
          for (const body of bodies) ids.push((await s().post(q, { body, postedBy: 'p' })).id);
          const got = await claimId(q, criteria);
          return got === null ? -1 : ids.indexOf(got);
        };
        const deep = `${'['.repeat(600)}${']'.repeat(600)}`;
        // An escaped surrogate pair and the raw character are the same string.
        expect(await firstRaw(['{"k":"x"}', String.raw`{"k":"\ud83d\ude00"}`, '{"k":"😀"}'], { k: '😀' })).to.equal(1);
        expect(await firstRaw(['{"k":"x"}', '{"k":"😀"}'], { k: { eq: '😀' } })).to.equal(1);
        // A lone surrogate and a NUL, escaped: valid JSON, equal to the same JavaScript strings.
        expect(await firstRaw(['{"k":"x"}', String.raw`{"k":"\ud800"}`], { k: '\ud800' })).to.equal(1);
        expect(await firstRaw(['{"k":"x"}', String.raw`{"k":"\u0000x"}`], { k: '\u0000x' })).to.equal(1);
        // \u00e9 unescapes to é; a decomposed é (e + U+0301) is another string.
        expect(await firstRaw(['{"k":"e\u0301"}', String.raw`{"k":"\u00e9"}`], { k: 'é' })).to.equal(1);
        // The last of duplicate keys counts.
        expect(await firstRaw(['{"k":"a","k":"b"}'], { k: 'a' })).to.equal(-1);
        expect(await firstRaw(['{"k":"a","k":"b"}'], { k: 'b' })).to.equal(0);
        // Numbers are doubles: 1.0000000000000001 is 1, 1e5000 is Infinity.
        expect(await firstRaw(['{"n":2}', '{"n":1.0000000000000001}'], { n: 1 })).to.equal(1);
        expect(await firstRaw(['{"n":2}', '{"n":1e5000}'], { n: { gt: 1e308 } })).to.equal(1);
        // Strings order by UTF-16 code units: U+1F600 (a surrogate pair, 0xD83D…) sorts before U+FFFF.
        expect(await firstRaw(['{"s":"\uffff"}', '{"s":"😀"}'], { s: { lt: '\uffff' } })).to.equal(1);
        // Booleans and null by JSON type: "true" is not true.
        expect(await firstRaw(['{"b":"true","z":null}', '{"b":true,"z":null}'], { b: true, z: null })).to.equal(1);
        expect(await firstRaw(['{"b":true}'], { b: 'true' })).to.equal(-1);
        // A field named __proto__ is a field like any other.
        expect(await firstRaw(['{"k":"x"}', '{"__proto__":"x"}'], JSON.parse('{"__proto__":"x"}') as Criteria)).to.equal(1);
        // Field names a database may not hold as they are: a NUL, a lone surrogate.
        expect(await firstRaw(['{"k":"x"}', String.raw`{"\u0000":"x"}`], { '\u0000': 'x' })).to.equal(1);
        expect(await firstRaw(['{"k":"x"}', String.raw`{"\udc00":"y"}`], { '\udc00': { eq: 'y' } })).to.equal(1);
        // Deep nesting beside the field that matches.
        expect(await firstRaw([`{"d":${deep},"k":"y"}`, `{"d":${deep},"k":"x"}`], { k: 'x' })).to.equal(1);
      });
    });

    describe('progress and result', () => {
      it('accepted progress makes the item processing and extends its lease to now + leaseSeconds (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 10 });
        const id = await post(q);
        await claimId(q);
        advance(8000);
        expect(await s().progress(q, id, '{"percent":40}')).to.deep.equal({ accepted: true, status: 'processing' });
        expect(await s().get(q, id)).to.deep.include({ status: 'processing', progress: '{"percent":40}', updatedAt: START + 8000, attempts: 1 });
        // The first lease would have ended at +10 s; the heartbeat runs it to +18 s.
        advance(9999);
        expect(await status(q, id)).to.equal('processing');
        advance(1);
        expect(await status(q, id)).to.equal('pending');
      });

      it('progress for an item whose lease was re-queued takes it back: processing again, not claimable (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 10 });
        const id = await post(q);
        await claimId(q, undefined, 'slow');
        advance(10_000);
        expect(await status(q, id)).to.equal('pending');
        expect(await s().progress(q, id, '{"percent":90}')).to.deep.equal({ accepted: true, status: 'processing' });
        expect(await claimId(q)).to.equal(null);
        expect(await s().get(q, id)).to.deep.include({ status: 'processing', attempts: 1 });
      });

      it('an accepted result finishes the item: finished, finishedAt set, lease gone (interface §4.2 rule 4, decisions §3.1)', async () => {
        const q = queue({ leaseSeconds: 10 });
        const id = await post(q);
        await claimId(q);
        advance(500);
        expect(await s().result(q, id, '{"output":"ok"}')).to.deep.equal({ accepted: true, status: 'finished' });
        expect(await s().get(q, id)).to.deep.include({ status: 'finished', result: '{"output":"ok"}', finishedAt: START + 500, updatedAt: START + 500, attempts: 1 });
        // The lease is gone: its end changes nothing.
        advance(60_000);
        expect(await status(q, id)).to.equal('finished');
      });

      it('a result is accepted for any non-terminal item, whoever sends it, also after its lease was re-queued or re-claimed (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 10 });
        const pending = await post(q);
        const requeued = await post(q);
        const reclaimed = await post(q);
        expect(await s().result(q, pending, '{"by":"anyone"}')).to.deep.equal({ accepted: true, status: 'finished' });
        await claimId(q, undefined, 'first');
        await claimId(q, undefined, 'first');
        advance(10_000);
        expect(await status(q, requeued)).to.equal('pending');
        expect(await claimId(q, undefined, 'second')).to.equal(requeued);
        expect(await claimId(q, undefined, 'second')).to.equal(reclaimed);
        // A late result from the first worker still counts.
        expect(await s().result(q, reclaimed, '{"by":"first"}')).to.deep.equal({ accepted: true, status: 'finished' });
        advance(10_000);
        expect(await status(q, requeued)).to.equal('pending');
        expect(await s().result(q, requeued, '{"by":"late"}')).to.deep.equal({ accepted: true, status: 'finished' });
        expect((await s().get(q, requeued))?.result).to.equal('{"by":"late"}');
      });

      it('a submission for a terminal item is answered accepted:false with its status and changes nothing (interface §4.2 rule 5, decisions §7)', async () => {
        const q = queue({ maxAttempts: 1, timeoutSeconds: 100 });
        const finished = await post(q);
        const failed = await post(q);
        const cancelled = await post(q);
        const timedout = await post(q);
        await claimId(q);
        await claimId(q);
        await s().result(q, finished, '{"r":1}');
        await s().error(q, failed, '{"e":1}');
        await s().cancel(q, cancelled);
        advance(100_000);
        expect(await status(q, timedout)).to.equal('timedout');
        const before = new Map<string, unknown>();
        for (const id of [finished, failed, cancelled, timedout]) before.set(id, await s().get(q, id));
        advance(1000);
        for (const [id, record] of before) {
          const st = (record as { status: string }).status;
          expect(await s().progress(q, id, '{"late":1}')).to.deep.equal({ accepted: false, status: st });
          expect(await s().result(q, id, '{"late":1}')).to.deep.equal({ accepted: false, status: st });
          expect(await s().error(q, id, '{"late":1}')).to.deep.equal({ accepted: false, status: st });
          expect(await s().cancel(q, id)).to.deep.equal({ accepted: false, status: st });
          expect(await s().get(q, id)).to.deep.equal(record);
        }
      });
    });

    describe('errors and leases', () => {
      it('an error re-queues the item while attempts remain, recorded, keeping its place before younger items (decisions §3.2, §3.4)', async () => {
        const q = queue({ maxAttempts: 3 });
        const a = await post(q);
        const b = await post(q);
        await claimId(q);
        advance(5);
        expect(await s().error(q, a, '{"exitCode":1}')).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 1, error: '{"exitCode":1}', finishedAt: null, updatedAt: START + 5 });
        expect(await claimId(q)).to.equal(a);
        expect(await claimId(q)).to.equal(b);
      });

      it('an error on the last attempt fails the item with the submitted record (decisions §3.2, §7)', async () => {
        const q = queue({ maxAttempts: 2 });
        const a = await post(q);
        await claimId(q);
        await s().error(q, a, '{"try":1}');
        await claimId(q);
        advance(3);
        expect(await s().error(q, a, '{"try":2}')).to.deep.equal({ accepted: true, status: 'failed' });
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', attempts: 2, error: '{"try":2}', finishedAt: START + 3 });
        expect(await claimId(q)).to.equal(null);
      });

      it('a result or an error with a delivery note writes a delivered / delivery-failed event before the others, carrying the code and the time; a 429 wish retries later (decisions §9.1)', async () => {
        const q = queue({ maxAttempts: 3 });
        const a = await post(q);
        const b = await post(q);
        await claimId(q);
        await claimId(q);
        expect(await s().result(q, a, '{"ok":true}', { code: 200, ms: 12 })).to.deep.equal({ accepted: true, status: 'finished' });
        expect(await s().error(q, b, '{"status":429}', { retryIn: 60 }, { code: 429, ms: 3 })).to.deep.equal({ accepted: true, status: 'pending' });
        expect((await s().get(q, b))?.runAt).to.equal(START + 60_000);
        expect(await claimId(q)).to.equal(null);
        advance(60_000);
        expect(await claimId(q)).to.equal(b);
        expect(await s().error(q, b, '{"status":null}', undefined, { code: null, ms: 1000 })).to.deep.equal({ accepted: true, status: 'pending' });
        const all = await h.events?.();
        if (!all) return;
        const of = (id: string): Array<Record<string, unknown>> => all.filter((e) => e.id === id).map((e) => ({ event: e.event, code: e.code, ms: e.ms }));
        expect(of(a)).to.deep.equal([
          { event: 'posted', code: undefined, ms: undefined },
          { event: 'claimed', code: undefined, ms: undefined },
          { event: 'delivered', code: 200, ms: 12 },
          { event: 'finished', code: undefined, ms: undefined },
        ]);
        expect(of(b).filter((e) => e.event === 'delivery-failed')).to.deep.equal([
          { event: 'delivery-failed', code: 429, ms: 3 },
          { event: 'delivery-failed', code: null, ms: 1000 },
        ]);
        expect(of(b).map((e) => e.event)).to.deep.equal(['posted', 'claimed', 'delivery-failed', 'error', 'requeued', 'claimed', 'delivery-failed', 'error', 'requeued']);
      });

      it('a re-queued item is not claimable before retryDelaySeconds have passed, not a millisecond early (decisions §2.2, §3.2)', async () => {
        const q = queue({ retryDelaySeconds: 5 });
        const a = await post(q);
        await claimId(q);
        await s().error(q, a, '{}');
        const b = await post(q);
        expect(await claimId(q)).to.equal(b);
        advance(4999);
        expect(await claimId(q)).to.equal(null);
        expect(await status(q, a)).to.equal('pending');
        advance(1);
        expect(await claimId(q)).to.equal(a);
      });

      it('a lease that ends re-queues the item at its end, not a millisecond early, keeping its place (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 10, maxAttempts: 2 });
        const a = await post(q);
        const b = await post(q);
        const claimed = await s().claim(q, { worker: 'w' });
        expect(claimed?.lease.until).to.equal(START + 10_000);
        advance(9999);
        expect(await status(q, a)).to.equal('claimed');
        advance(1);
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 1, error: null, finishedAt: null, updatedAt: START + 10_000 });
        expect(await claimId(q)).to.equal(a);
        expect(await claimId(q)).to.equal(b);
      });

      it('a lease that ends on the last attempt fails the item with {reason: "lease expired"} (decisions §3.2, §7)', async () => {
        const q = queue({ leaseSeconds: 10, maxAttempts: 2 });
        const a = await post(q);
        await claimId(q);
        advance(10_000);
        const again = await s().claim(q, { worker: 'w2' });
        expect(again).to.deep.include({ id: a, attempts: 2 });
        expect(again?.lease.until).to.equal(START + 20_000);
        advance(9999);
        expect(await status(q, a)).to.equal('claimed');
        advance(1);
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', attempts: 2, error: LEASE_EXPIRED, finishedAt: START + 20_000 });
        expect(JSON.parse(LEASE_EXPIRED)).to.deep.equal({ reason: 'lease expired' });
      });

      it('an item whose lease ended waits retryDelaySeconds after the lease end before it is claimable (decisions §3.2)', async () => {
        const q = queue({ leaseSeconds: 10, retryDelaySeconds: 20 });
        const a = await post(q);
        await claimId(q);
        advance(10_000);
        expect(await claimId(q)).to.equal(null);
        advance(19_999);
        expect(await claimId(q)).to.equal(null);
        advance(1);
        expect(await claimId(q)).to.equal(a);
      });

      it('timeoutSeconds after postedAt a non-terminal item is timedout, not a millisecond early; later submissions are not accepted (decisions §2.2)', async () => {
        const q = queue({ timeoutSeconds: 100, leaseSeconds: 1000 });
        const first = await post(q);
        advance(1000);
        const second = await post(q);
        const third = await post(q);
        await claimId(q);
        await claimId(q);
        await s().progress(q, second, '{}');
        advance(98_999);
        expect(await status(q, first)).to.equal('claimed');
        advance(1);
        expect(await s().get(q, first)).to.deep.include({ status: 'timedout', finishedAt: START + 100_000 });
        expect(await status(q, second)).to.equal('processing');
        advance(1000);
        expect(await s().get(q, second)).to.deep.include({ status: 'timedout', finishedAt: START + 101_000 });
        expect(await s().get(q, third)).to.deep.include({ status: 'timedout', finishedAt: START + 101_000, attempts: 0 });
        expect(await s().result(q, second, '{}')).to.deep.equal({ accepted: false, status: 'timedout' });
        expect(await s().progress(q, first, '{}')).to.deep.equal({ accepted: false, status: 'timedout' });
      });

      it('a deadline further off than a timer can wait (a 30-day timeout: setTimeout holds at most 24.8 days) is kept without waking in a loop, and falls on time (decisions §2.2)', async () => {
        const days30 = 30 * 86_400;
        const q = queue({ timeoutSeconds: days30, leaseSeconds: 1000, retainSeconds: days30 });
        // Node answers a longer setTimeout with a warning and a 1 ms timer: a store that set one would wake every millisecond.
        const overflows: Error[] = [];
        const onWarning = (w: Error): void => void (w.name === 'TimeoutOverflowWarning' && overflows.push(w));
        process.on('warning', onWarning);
        try {
          const id = await post(q);
          await sleep(200);
          expect(overflows.map((w) => w.message)).to.deep.equal([]);
          expect(await status(q, id)).to.equal('pending');
          advance(days30 * 1000 - 1);
          await h.settle?.();
          expect(await status(q, id)).to.equal('pending');
          advance(1);
          await h.settle?.();
          expect(await s().get(q, id)).to.deep.include({ status: 'timedout', finishedAt: START + days30 * 1000 });
          await sleep(50);
          expect(overflows.map((w) => w.message)).to.deep.equal([]);
        } finally {
          process.off('warning', onWarning);
        }
      });

      it('a leased item whose timeout passed before its lease ended is timedout, not failed with "lease expired", when both are applied late (decisions §2.2, §3.2)', async () => {
        const q = queue({ timeoutSeconds: 10, leaseSeconds: 30, maxAttempts: 1 });
        const id = await post(q);
        await claimId(q);
        advance(40_000);
        expect(await s().get(q, id)).to.deep.include({ status: 'timedout', error: null, attempts: 1 });
      });

      it('cancel makes a non-terminal item cancelled; a second cancel and later submissions are not accepted (decisions §3.6)', async () => {
        const q = queue();
        const pending = await post(q);
        const claimed = await post(q);
        await claimId(q);
        await claimId(q);
        const fresh = await post(q);
        advance(2);
        expect(await s().cancel(q, fresh)).to.deep.equal({ accepted: true, status: 'cancelled' });
        expect(await s().cancel(q, claimed)).to.deep.equal({ accepted: true, status: 'cancelled' });
        expect(await s().get(q, claimed)).to.deep.include({ status: 'cancelled', finishedAt: START + 2, attempts: 1 });
        expect(await s().cancel(q, claimed)).to.deep.equal({ accepted: false, status: 'cancelled' });
        expect(await s().result(q, claimed, '{}')).to.deep.equal({ accepted: false, status: 'cancelled' });
        expect(await claimId(q)).to.equal(null);
        expect(await status(q, pending)).to.equal('claimed');
      });
    });

    describe('retention', () => {
      it('with retainFrom "finished", a terminal item is purged retainSeconds after it became terminal, not a millisecond early (decisions §2.2)', async () => {
        const q = queue({ retainSeconds: 100 });
        const a = await post(q);
        const b = await post(q);
        await claimId(q);
        advance(10);
        await s().result(q, a, '{}');
        await s().cancel(q, b);
        advance(99_999);
        expect(await status(q, a)).to.equal('finished');
        advance(1);
        expect(await s().get(q, a)).to.equal(null);
        expect(await s().get(q, b)).to.equal(null);
        expect(await s().result(q, a, '{}')).to.equal(null);
        expect(await s().counts(q)).to.deep.equal({});
      });

      it('with retainFrom "fetched", a terminal item never fetched is kept; one fetched is purged retainSeconds after that first fetch (decisions §2.2, interface §2.1)', async () => {
        const q = queue({ retainFrom: 'fetched', retainSeconds: 100 });
        const kept = await post(q);
        const fetched = await post(q);
        await s().cancel(q, kept);
        await s().cancel(q, fetched);
        advance(50_000);
        expect(await status(q, fetched)).to.equal('cancelled');
        advance(99_999);
        expect(await status(q, fetched)).to.equal('cancelled');
        advance(1);
        expect(await s().get(q, fetched)).to.equal(null);
        advance(30 * 86_400_000);
        expect(await s().counts(q)).to.deep.equal({ cancelled: 1 });
        expect(await status(q, kept)).to.equal('cancelled');
      });

      it('only the first fetch of a terminal item stamps it; a fetch before it was terminal does not (interface §2.1)', async () => {
        const q = queue({ retainFrom: 'fetched', retainSeconds: 100 });
        const a = await post(q);
        expect(await status(q, a)).to.equal('pending');
        advance(500_000);
        await s().result(q, a, '{}');
        advance(1000);
        expect(await status(q, a)).to.equal('finished'); // the stamp: retention runs to +100 s from here
        advance(50_000);
        expect(await status(q, a)).to.equal('finished'); // a later fetch does not move it
        advance(49_999);
        expect(await status(q, a)).to.equal('finished');
        advance(1);
        expect(await s().get(q, a)).to.equal(null);
      });
    });

    describe('idempotency keys', () => {
      it('a second post with the same key returns the first item and creates nothing (decisions §3.5)', async () => {
        const q = queue();
        const first = await s().post(q, { body: '{"n":1}', postedBy: 'p', idempotencyKey: 'order-17' });
        await claimId(q);
        const second = await s().post(q, { body: '{"n":2}', postedBy: 'p', idempotencyKey: 'order-17' });
        expect(second).to.deep.equal({ id: first.id, status: 'claimed', created: false });
        expect(await s().counts(q)).to.deep.equal({ claimed: 1 });
        const other = await s().post(q, { body: '{"n":3}', postedBy: 'p', idempotencyKey: 'order-18' });
        expect(other.created).to.equal(true);
        expect(other.id).to.not.equal(first.id);
        const unkeyed = await s().post(q, { body: '{"n":4}', postedBy: 'p' });
        expect(unkeyed.created).to.equal(true);
      });

      it('keys are per queue (decisions §3.5)', async () => {
        const q1 = queue();
        const q2 = queue();
        const a = await s().post(q1, { body: '{}', postedBy: 'p', idempotencyKey: 'k' });
        const b = await s().post(q2, { body: '{}', postedBy: 'p', idempotencyKey: 'k' });
        expect(b.created).to.equal(true);
        expect(await s().get(q2, a.id)).to.equal(null);
      });

      it('a key names its item while the item lives, terminal too; once purged the key creates a new item (decisions §3.5)', async () => {
        const q = queue({ retainSeconds: 100 });
        const first = await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'k' });
        await s().cancel(q, first.id);
        advance(99_999);
        expect(await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'k' })).to.deep.equal({ id: first.id, status: 'cancelled', created: false });
        advance(1);
        const again = await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'k' });
        expect(again).to.deep.include({ status: 'pending', created: true });
        expect(again.id).to.not.equal(first.id);
      });

      it('a key freed by a purge that falls between calls made together creates a new item for the post after it (decisions §2.2, §3.5)', async () => {
        const q = queue({ retainSeconds: 0 });
        const first = await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'k0' });
        // Made together (one transaction where a store folds calls): the result finishes the item,
        // retention (0 s) purges it at the next call, and the post after that finds its key free.
        const [finished, gone, again] = await Promise.all([s().result(q, first.id, '{}'), s().cancel(q, first.id), s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'k0' })]);
        expect(finished).to.deep.equal({ accepted: true, status: 'finished' });
        expect(gone).to.equal(null);
        expect(again).to.deep.include({ status: 'pending', created: true });
        expect(again.id).to.not.equal(first.id);
      });
    });

    describe('definition changes', () => {
      it('an item that ended under retainSeconds 0 is purged by the request that ended it: a longer retention defined right after does not bring it back, and the counts never show it (decisions §2.2, §2.4, §5.1)', async () => {
        let q = queue({ retainSeconds: 0 });
        const a = await post(q);
        const b = await post(q);
        // The counts asked in the same turn as the changes, before any timer could run.
        const [finished, cancelled, seen] = await Promise.all([s().result(q, a, '{}'), s().cancel(q, b), s().overview(q, { oldest: 10, leases: 10 })]);
        expect(finished).to.deep.equal({ accepted: true, status: 'finished' });
        expect(cancelled).to.deep.equal({ accepted: true, status: 'cancelled' });
        expect(seen.counts).to.deep.include({ finished: 0, cancelled: 0 });
        expect((await s().overview(q, { oldest: 10, leases: 10 })).counts).to.deep.include({ pending: 0, finished: 0, cancelled: 0 });
        q = redefine(q, { retainSeconds: 1000 });
        expect(await s().get(q, a)).to.equal(null);
        expect(await s().progress(q, b, '{}')).to.equal(null);
      });

      it('shorter retention applies to items already terminal (decisions §2.4)', async () => {
        let q = queue({ retainSeconds: 1000 });
        const a = await post(q);
        const b = await post(q);
        await s().result(q, a, '{}');
        advance(500_000);
        await s().result(q, b, '{}');
        q = redefine(q, { retainSeconds: 100 });
        expect(await s().get(q, a)).to.equal(null);
        expect(await status(q, b)).to.equal('finished');
        advance(100_000);
        expect(await s().get(q, b)).to.equal(null);
      });

      it('a timeout added or shortened applies to items already queued, counted from postedAt (decisions §2.2, §2.4)', async () => {
        let q = queue({ leaseSeconds: 10_000 });
        const a = await post(q);
        advance(150_000);
        const b = await post(q);
        await claimId(q);
        advance(100_000);
        q = redefine(q, { leaseSeconds: 10_000, timeoutSeconds: 200 });
        expect(await s().get(q, a)).to.deep.include({ status: 'timedout', finishedAt: START + 250_000 });
        expect(await status(q, b)).to.equal('pending');
        q = redefine(q, { leaseSeconds: 10_000, timeoutSeconds: 50 });
        expect(await s().get(q, b)).to.deep.include({ status: 'timedout', finishedAt: START + 250_000 });
      });

      it('a longer retention or a removed timeout keeps items that the old rules would have ended (decisions §2.4)', async () => {
        let q = queue({ retainSeconds: 100, timeoutSeconds: 100 });
        const done = await post(q);
        const waiting = await post(q);
        await s().result(q, done, '{}');
        q = redefine(q, { retainSeconds: 1000 });
        advance(500_000);
        expect(await status(q, done)).to.equal('finished');
        expect(await status(q, waiting)).to.equal('pending');
      });

      it('a lengthened timeout or retention still ends the item, at the time the new rules give, not a millisecond early (decisions §2.2, §2.4)', async () => {
        let q = queue({ retainSeconds: 100, timeoutSeconds: 100 });
        const done = await post(q);
        const waiting = await post(q);
        await s().result(q, done, '{}');
        q = redefine(q, { retainSeconds: 300, timeoutSeconds: 300 });
        // The old deadlines come and go: both items stay.
        advance(150_000);
        expect(await status(q, done)).to.equal('finished');
        expect(await status(q, waiting)).to.equal('pending');
        advance(150_000 - 1);
        expect(await status(q, done)).to.equal('finished');
        expect(await status(q, waiting)).to.equal('pending');
        advance(1);
        expect(await s().get(q, waiting)).to.deep.include({ status: 'timedout', finishedAt: START + 300_000 });
        expect(await s().get(q, done)).to.equal(null);
      });

      it('lease length and maxAttempts apply as they stand when the rule runs (decisions §2.4, §3.2)', async () => {
        let q = queue({ leaseSeconds: 10, maxAttempts: 3 });
        const a = await post(q);
        await claimId(q);
        q = redefine(q, { leaseSeconds: 10, maxAttempts: 1 });
        advance(10_000);
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', error: LEASE_EXPIRED });
        q = redefine(q, { leaseSeconds: 5 });
        await post(q);
        expect((await s().claim(q, { worker: 'w' }))?.lease.until).to.equal(now() + 5000);
      });

      it('a deleted queue keeps its items as they are, across a restart too; put back, what is due applies under the rules put back (decisions §2.4)', async () => {
        // Deleted with a finished item whose retention of 1 s falls while it is deleted (a timer
        // set for it fires meanwhile), and a leased item on its last attempt whose lease ends
        // while it is deleted and the store restarts.
        let retained = queue({ retainSeconds: 1 });
        const done = await post(retained);
        await s().result(retained, done, '{}');
        let leased = queue({ leaseSeconds: 100, maxAttempts: 1 });
        const last = await post(leased);
        await claimId(leased);
        for (const q of [retained, leased]) {
          configs.delete(q.key);
          s().rulesChanged?.(q.key);
        }
        advance(5_000);
        await sleep(1_200);
        await h.settle?.();
        advance(200_000);
        await h.reopen();
        await h.settle?.();
        retained = redefine(retained, { retainSeconds: 3600 });
        leased = redefine(leased, { leaseSeconds: 100, maxAttempts: 1 });
        for (const q of [retained, leased]) s().rulesChanged?.(q.key);
        expect(await s().get(retained, done)).to.deep.include({ status: 'finished', finishedAt: START });
        expect(await s().get(leased, last)).to.deep.include({ status: 'failed', attempts: 1, error: LEASE_EXPIRED, finishedAt: now() });
      });
    });

    describe('waiting', () => {
      it('a claim with waitMs is answered with an item posted during the wait (decisions §3.3)', async () => {
        const q = queue();
        const started = Date.now();
        const waiting = h.waits.claim(q, { worker: 'patient', waitMs: 5000 });
        await sleep(50);
        const id = await post(q, { late: true });
        const claimed = await waiting;
        expect(claimed).to.deep.equal({ id, item: '{"late":true}', attempts: 1, lease: { worker: 'patient', until: now() + 30_000 } });
        expect(Date.now() - started).to.be.below(4000);
        expect(await status(q, id)).to.equal('claimed');
      });

      it('a waiting claim is not handed an item its criteria reject, and answers null when the wait is up (decisions §3.3)', async () => {
        const q = queue();
        const waiting = h.waits.claim(q, { worker: 'w', criteria: { k: 1 }, waitMs: 300 });
        await sleep(30);
        const other = await post(q, { k: 2 });
        expect(await waiting).to.equal(null);
        expect(await status(q, other)).to.equal('pending');
      });

      it('a claim whose signal aborts answers null and claims nothing (decisions §1.1, §3.3)', async () => {
        const q = queue();
        const controller = new AbortController();
        const waiting = h.waits.claim(q, { worker: 'gone', waitMs: 5000, signal: controller.signal });
        await sleep(30);
        controller.abort();
        expect(await waiting).to.equal(null);
        const id = await post(q);
        await sleep(30);
        expect(await s().get(q, id)).to.deep.include({ status: 'pending', attempts: 0 });
      });

      it('a fetch with waitMs is answered when the item becomes terminal (decisions §3.6)', async () => {
        const q = queue();
        const id = await post(q);
        await claimId(q);
        const started = Date.now();
        const waiting = h.waits.get(q, id, 5000);
        await sleep(50);
        await s().result(q, id, '{"done":true}');
        expect(await waiting).to.deep.include({ status: 'finished', result: '{"done":true}' });
        expect(Date.now() - started).to.be.below(4000);
      });
    });

    describe('pausing (decisions §8.4)', () => {
      it('a paused queue leases nothing: a claim, a claim with criteria and a claim of up to max find nothing; a resume leases again, oldest first', async () => {
        const q = queue();
        const ids = [await post(q, { kind: 'a' }), await post(q, { kind: 'b' })];
        expect(await s().setPaused(q, true)).to.equal(true);
        expect(await claimId(q)).to.equal(null);
        expect(await claimId(q, { kind: 'b' })).to.equal(null);
        expect(await s().claimMany(q, { worker: 'w' }, 5)).to.deep.equal([]);
        expect(await s().claimMany(q, { worker: 'w', criteria: { kind: 'a' } }, 5)).to.deep.equal([]);
        expect(await s().counts(q)).to.deep.equal({ pending: 2 });
        expect(await s().setPaused(q, false)).to.equal(false);
        expect(await claimId(q)).to.equal(ids[0]);
        expect((await s().claimMany(q, { worker: 'w' }, 5)).map((c) => c.id)).to.deep.equal([ids[1]]);
      });

      it('everything but leasing goes on while paused: posts, fetches, progress, results, errors and cancels are taken as ever', async () => {
        const q = queue({ maxAttempts: 2 });
        const [a, b, c] = [await post(q), await post(q), await post(q)];
        await claimId(q);
        await claimId(q);
        await s().setPaused(q, true);
        const d = await post(q, { late: true }, 'key-d');
        expect(await post(q, { again: true }, 'key-d')).to.equal(d);
        expect((await s().postMany(q, [{ body: '{}', postedBy: 'p' }]))[0]).to.deep.include({ status: 'pending', created: true });
        expect(await s().progress(q, a, '{"pct":50}')).to.deep.equal({ accepted: true, status: 'processing' });
        expect(await s().result(q, a, '{}')).to.deep.equal({ accepted: true, status: 'finished' });
        expect(await s().error(q, b, '{}')).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await s().cancel(q, c)).to.deep.equal({ accepted: true, status: 'cancelled' });
        expect(await s().get(q, d)).to.deep.include({ status: 'pending', attempts: 0 });
        expect(await claimId(q)).to.equal(null);
        expect(await s().counts(q)).to.deep.equal({ pending: 3, finished: 1, cancelled: 1 });
      });

      it('deadlines go on while paused: a lease ends and re-queues its item, a timeout and retention fall on time', async () => {
        const q = queue({ leaseSeconds: 10, timeoutSeconds: 100, retainSeconds: 20 });
        const leased = await post(q);
        const done = await post(q);
        const waiting = await post(q);
        await claimId(q);
        await claimId(q);
        await s().result(q, done, '{}');
        await s().setPaused(q, true);
        advance(10_000);
        await h.settle?.();
        expect(await status(q, leased)).to.equal('pending');
        advance(10_000);
        await h.settle?.();
        expect(await status(q, done)).to.equal(null);
        advance(80_000);
        await h.settle?.();
        expect(await status(q, waiting)).to.equal('timedout');
        expect(await status(q, leased)).to.equal('timedout');
        expect(await claimId(q)).to.equal(null);
      });

      it('pause and resume are idempotent, and the overview says which the queue is; other queues are not paused', async () => {
        const q = queue();
        const other = queue();
        const id = await post(other);
        expect((await s().overview(q, { oldest: 0, leases: 0 })).paused).to.equal(false);
        expect(await s().setPaused(q, true)).to.equal(true);
        expect(await s().setPaused(q, true)).to.equal(true);
        expect((await s().overview(q, { oldest: 0, leases: 0 })).paused).to.equal(true);
        expect((await s().overview(other, { oldest: 0, leases: 0 })).paused).to.equal(false);
        expect(await claimId(other)).to.equal(id);
        expect(await s().setPaused(q, false)).to.equal(false);
        expect(await s().setPaused(q, false)).to.equal(false);
        expect((await s().overview(q, { oldest: 0, leases: 0 })).paused).to.equal(false);
        expect(await s().setPaused(other, false)).to.equal(false);
        expect((await s().overview(other, { oldest: 0, leases: 0 })).paused).to.equal(false);
      });

      it('a pause survives a restart, and so does a resume; a queue paused before it held any item is paused too', async () => {
        const q = queue();
        const empty = queue();
        const resumed = queue();
        const id = await post(q);
        await s().setPaused(q, true);
        await s().setPaused(empty, true);
        await s().setPaused(resumed, true);
        await s().setPaused(resumed, false);
        await h.reopen();
        expect(await claimId(q)).to.equal(null);
        expect((await s().overview(q, { oldest: 0, leases: 0 })).paused).to.equal(true);
        expect((await s().overview(empty, { oldest: 0, leases: 0 })).paused).to.equal(true);
        expect((await s().overview(resumed, { oldest: 0, leases: 0 })).paused).to.equal(false);
        await h.reopen();
        await s().setPaused(q, false);
        await h.reopen();
        expect(await claimId(q)).to.equal(id);
      });

      it('the pause belongs to the host/name pair, as the items do: a queue deleted and put back is still paused', async () => {
        let q = queue();
        const id = await post(q);
        await s().setPaused(q, true);
        configs.delete(q.key);
        s().rulesChanged?.(q.key);
        await h.reopen();
        q = redefine(q, { leaseSeconds: 20 });
        s().rulesChanged?.(q.key);
        expect(await claimId(q)).to.equal(null);
        await s().setPaused(q, false);
        expect(await claimId(q)).to.equal(id);
      });

      it('a held claim keeps waiting while paused, past items posted meanwhile, and is answered as soon as the queue is resumed', async () => {
        const q = queue();
        const early = await post(q, { early: true });
        await s().setPaused(q, true);
        const started = Date.now();
        let answered = false;
        const waiting = h.waits.claim(q, { worker: 'patient', waitMs: 20_000 }).finally(() => (answered = true));
        await sleep(50);
        await post(q, { late: true });
        await sleep(200);
        expect(answered, 'answered while paused').to.equal(false);
        await s().setPaused(q, false);
        expect((await waiting)?.id).to.equal(early);
        expect(Date.now() - started).to.be.below(10_000);
      });

      it('a held claim of up to max keeps waiting while paused and takes what it may once resumed', async () => {
        const q = queue();
        await s().setPaused(q, true);
        const ids = [await post(q), await post(q)];
        const waiting = h.waits.claimMany(q, { worker: 'patient', waitMs: 20_000, max: 5 });
        await sleep(100);
        await s().setPaused(q, false);
        expect((await waiting).map((c) => c.id)).to.deep.equal(ids);
      });
    });

    describe('post options: delay, priority, group (decisions §8.1)', () => {
      async function postWith(q: QueueRef, options: PostOptions, body: object = {}, idempotencyKey?: string): Promise<string> {
        return (await s().post(q, { body: JSON.stringify(body), postedBy: 'producer', idempotencyKey, options })).id;
      }

      it('a claim takes the highest priority first, then the oldest within one priority (decisions §8.1)', async () => {
        const q = queue();
        const low = await postWith(q, { priority: -5 });
        const plain = await post(q);
        advance(1);
        const high = await postWith(q, { priority: 7 });
        const high2 = await postWith(q, { priority: 7 });
        const mid = await postWith(q, { priority: 1 });
        const plain2 = await post(q);
        const got: Array<string | null> = [];
        for (let i = 0; i < 7; i++) got.push(await claimId(q));
        expect(got).to.deep.equal([high, high2, mid, plain, plain2, low, null]);
      });

      it('a multi-claim takes its items in claim order, priority first (decisions §8.1)', async () => {
        const q = queue();
        const a = await post(q);
        const b = await postWith(q, { priority: 100 });
        const c = await postWith(q, { priority: -100 });
        const d = await postWith(q, { priority: 3 });
        expect((await s().claimMany(q, { worker: 'w' }, 10)).map((x) => x.id)).to.deep.equal([b, d, a, c]);
      });

      it('a claim with criteria takes the highest priority among the items that match (decisions §8.1)', async () => {
        const q = queue();
        await postWith(q, { priority: 9 }, { kind: 'x' });
        const a = await post(q, { kind: 'y' });
        const b = await postWith(q, { priority: 2 }, { kind: 'y' });
        expect(await claimId(q, { kind: 'y' })).to.equal(b);
        expect(await claimId(q, { kind: 'y' })).to.equal(a);
        expect(await claimId(q, { kind: 'y' })).to.equal(null);
      });

      it('a delayed item is pending, keeps its postedAt, is not claimable a millisecond early, and its record says runAt (decisions §8.1)', async () => {
        const q = queue();
        const a = await postWith(q, { delaySeconds: 10 });
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', postedAt: START, runAt: START + 10_000, priority: 0, group: null });
        advance(9999);
        expect(await claimId(q)).to.equal(null);
        advance(1);
        const b = await post(q);
        expect(await claimId(q), 'once claimable it goes before items posted after it').to.equal(a);
        expect(await claimId(q)).to.equal(b);
        expect(await s().get(q, a)).to.deep.include({ status: 'claimed', runAt: null });
      });

      it('an item posted for a time (at) is claimable from that time; a time already past is at once (decisions §8.1)', async () => {
        const q = queue();
        const later = await postWith(q, { at: START + 5_000 });
        const past = await postWith(q, { at: START - 5_000 });
        expect(await s().get(q, past)).to.deep.include({ runAt: null });
        expect(await s().get(q, later)).to.deep.include({ runAt: START + 5_000 });
        expect(await claimId(q)).to.equal(past);
        expect(await claimId(q)).to.equal(null);
        advance(5_000);
        expect(await claimId(q)).to.equal(later);
      });

      it('a delayed item of a higher priority waits its time, then goes first (decisions §8.1)', async () => {
        const q = queue();
        const urgent = await postWith(q, { delaySeconds: 2, priority: 50 });
        const a = await post(q);
        const b = await post(q);
        expect(await claimId(q)).to.equal(a);
        advance(2_000);
        expect(await claimId(q)).to.equal(urgent);
        expect(await claimId(q)).to.equal(b);
      });

      it('a retried item keeps its place within its priority, and runAt shows its retry delay (decisions §8.1, §3.2)', async () => {
        const q = queue({ retryDelaySeconds: 5 });
        const a = await postWith(q, { priority: 4, group: 'g1' });
        const b = await postWith(q, { priority: 4 });
        const c = await post(q);
        expect(await claimId(q)).to.equal(a);
        advance(1);
        await s().error(q, a, '{}');
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', runAt: START + 5_001, priority: 4, group: 'g1' });
        advance(5_000);
        expect(await claimId(q)).to.equal(a);
        expect(await claimId(q)).to.equal(b);
        expect(await claimId(q)).to.equal(c);
      });

      it('a post repeating an Idempotency-Key returns the first item whatever its options (decisions §8.1)', async () => {
        const q = queue();
        const first = await postWith(q, { priority: 3, group: 'a' }, { n: 1 }, 'k');
        const again = await s().post(q, { body: '{"n":2}', postedBy: 'producer', idempotencyKey: 'k', options: { priority: -3, group: 'b', delaySeconds: 60 } });
        expect(again).to.deep.include({ id: first, created: false });
        expect(await s().get(q, first)).to.deep.include({ priority: 3, group: 'a', runAt: null });
        const [batch] = await s().postMany(q, [{ body: '{}', postedBy: 'producer', idempotencyKey: 'k', options: { priority: 9 } }]);
        expect(batch).to.deep.include({ id: first, created: false });
      });

      it('options apply to each item of a batch (decisions §8.1)', async () => {
        const q = queue();
        const options: PostOptions = { priority: 2, group: 'batch', delaySeconds: 1 };
        const out = await s().postMany(q, [0, 1].map((n) => ({ body: `{"n":${n}}`, postedBy: 'producer', options })));
        for (const o of out) expect(await s().get(q, o.id)).to.deep.include({ priority: 2, group: 'batch', runAt: START + 1_000 });
        const plain = await post(q);
        expect(await claimId(q)).to.equal(plain);
        advance(1_000);
        expect([await claimId(q), await claimId(q)]).to.deep.equal(out.map((o) => o.id));
      });

      it('priority, group and a delay survive a restart, claim order included (decisions §8.1, §6)', async () => {
        const q = queue();
        const a = await post(q);
        const b = await postWith(q, { priority: 1, group: 'g' });
        const c = await postWith(q, { priority: 5, delaySeconds: 3 });
        const before = await Promise.all([a, b, c].map((id) => s().get(q, id)));
        await h.reopen();
        expect(await Promise.all([a, b, c].map((id) => s().get(q, id)))).to.deep.equal(before);
        expect(await claimId(q)).to.equal(b);
        advance(3_000);
        expect(await claimId(q)).to.equal(c);
        expect(await claimId(q)).to.equal(a);
      });
    });

    describe('retries: backoff, the worker\'s say, release (decisions §8.2)', () => {
      /** Claims the item (the only claimable one) and hands in an error, with the worker's wish if any. */
      async function fail(q: QueueRef, id: string, wish?: RetryWish): Promise<SubmitOutcome | null> {
        expect(await claimId(q)).to.equal(id);
        return s().error(q, id, '{"why":"broken"}', wish);
      }
      async function runAtOf(q: QueueRef, id: string): Promise<number | null> {
        return (await s().get(q, id))?.runAt ?? null;
      }

      it('exponential backoff doubles the delay after each failed attempt, a lease end included, up to retryDelayMaxSeconds (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 6, leaseSeconds: 5, retryDelaySeconds: 10, retryBackoff: 'exponential', retryDelayMaxSeconds: 35 });
        const a = await post(q);
        const waits: number[] = [];
        for (let n = 1; n <= 4; n++) {
          expect(await fail(q, a)).to.deep.equal({ accepted: true, status: 'pending' });
          const at = (await runAtOf(q, a))!;
          waits.push(at - now());
          advance(at - now() - 1);
          expect(await claimId(q), `a millisecond before the delay after attempt ${n} ends`).to.equal(null);
          advance(1);
        }
        // The fifth attempt's lease ends: a failed attempt as well, with the capped delay.
        expect(await claimId(q)).to.equal(a);
        advance(5000);
        waits.push((await runAtOf(q, a))! - now());
        expect(waits).to.deep.equal([10_000, 20_000, 35_000, 35_000, 35_000]);
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 5 });
      });

      it('fixed backoff keeps retryDelaySeconds whatever the attempt; retryDelayMaxSeconds bounds only exponential backoff (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 4, retryDelaySeconds: 40, retryDelayMaxSeconds: 5 });
        const a = await post(q);
        for (let n = 1; n <= 3; n++) {
          await fail(q, a);
          expect((await runAtOf(q, a))! - now()).to.equal(40_000);
          advance(40_000);
        }
      });

      it('jitter shortens each delay by at most retryJitter of itself, the same on every store, and spreads items that fail together (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 3, retryDelaySeconds: 100, retryJitter: 0.5 });
        const waits: number[] = [];
        for (let n = 0; n < 20; n++) {
          const id = await post(q);
          await fail(q, id);
          const wait = (await runAtOf(q, id))! - now();
          expect(wait).to.be.within(50_000, 100_000);
          expect(wait).to.equal(retryDelay(q.config, 1, id));
          waits.push(wait);
        }
        expect(new Set(waits).size, 'twenty items failing at once are spread').to.be.greaterThan(15);
      });

      it('retryIn puts the computed delay aside for this failure: claimable again that many seconds from now, 0 at once (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 5, retryDelaySeconds: 600 });
        const a = await post(q);
        expect(await fail(q, a, { retryIn: 3 })).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 1, runAt: now() + 3000, error: '{"why":"broken"}' });
        advance(2999);
        expect(await claimId(q)).to.equal(null);
        advance(1);
        expect(await fail(q, a, { retryIn: 0 })).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await runAtOf(q, a)).to.equal(null);
        expect(await claimId(q)).to.equal(a);
        // Without a wish, the queue's own delay again.
        await s().error(q, a, '{}');
        expect((await runAtOf(q, a))! - now()).to.equal(600_000);
      });

      it('with no attempt left the item fails whatever retryIn says (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 1 });
        const a = await post(q);
        expect(await fail(q, a, { retryIn: 5 })).to.deep.equal({ accepted: true, status: 'failed' });
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', attempts: 1, runAt: null, finishedAt: now() });
      });

      it('final fails the item at once with attempts left, its error kept; a terminal item takes no wish (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 10, retryDelaySeconds: 5 });
        const a = await post(q);
        expect(await fail(q, a, { final: true })).to.deep.equal({ accepted: true, status: 'failed' });
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', attempts: 1, error: '{"why":"broken"}', finishedAt: now(), runAt: null });
        expect(await s().error(q, a, '{}', { retryIn: 0 })).to.deep.equal({ accepted: false, status: 'failed' });
        expect(await claimId(q)).to.equal(null);
      });

      it('release: a leased item is pending again in its place, its claim not counted; any other item is left as it is (decisions §8.2)', async () => {
        const q = queue({ maxAttempts: 1 });
        const a = await post(q);
        const b = await post(q);
        expect(await claimId(q)).to.equal(a);
        expect(await s().release(q, a, 0)).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 0, runAt: null });
        expect(await s().release(q, a, 0)).to.deep.equal({ accepted: false, status: 'pending' });
        // It keeps its place ahead of b, and its one attempt is still to come.
        expect(await claimId(q)).to.equal(a);
        await s().progress(q, a, '{"pct":10}');
        expect(await s().release(q, a, 0)).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await claimId(q)).to.equal(a);
        expect(await s().error(q, a, '{}')).to.deep.equal({ accepted: true, status: 'failed' });
        expect(await s().release(q, a, 0)).to.deep.equal({ accepted: false, status: 'failed' });
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', attempts: 1 });
        expect(await s().release(q, 'ffffffffffffffff', 0)).to.equal(null);
        expect(await claimId(q)).to.equal(b);
      });

      it('release with a delay: not claimable before it ends; a held claim takes it then (decisions §8.2)', async () => {
        const q = queue();
        const a = await post(q);
        await claimId(q);
        expect(await s().release(q, a, 7)).to.deep.equal({ accepted: true, status: 'pending' });
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 0, runAt: now() + 7000 });
        advance(6999);
        expect(await claimId(q)).to.equal(null);
        advance(1);
        expect(await claimId(q)).to.equal(a);
      });

      it('a release, a retryIn and a backoff delay survive a restart (decisions §6, §8.2)', async () => {
        const q = queue({ maxAttempts: 5, retryDelaySeconds: 10, retryBackoff: 'exponential' });
        const [a, b, c] = [await post(q), await post(q), await post(q)];
        await fail(q, a);
        await fail(q, b);
        await s().error(q, b, '{}', { retryIn: 0 });
        // b: pending again at once (attempts 1); c is next in claim order after b.
        expect(await claimId(q)).to.equal(b);
        await s().release(q, b, 4);
        expect(await claimId(q)).to.equal(c);
        await s().error(q, c, '{}', { retryIn: 2 });
        const before = await Promise.all([a, b, c].map((id) => s().get(q, id)));
        await h.reopen();
        expect(await Promise.all([a, b, c].map((id) => s().get(q, id)))).to.deep.equal(before);
        expect(before.map((r) => r!.attempts)).to.deep.equal([1, 1, 1]);
        advance(2000);
        expect(await claimId(q)).to.equal(c);
        advance(2000);
        expect(await claimId(q)).to.equal(b);
        advance(6000);
        expect(await claimId(q)).to.equal(a);
      });
    });

    describe('durability (decisions §6: a restart brings back every item, lease and status)', () => {
      it('a posted item survives a restart, record and claim order included', async () => {
        const q = queue();
        const a = await s().post(q, { body: '{"n":1}', postedBy: 'alice', idempotencyKey: 'ka' });
        advance(3);
        const b = await post(q, { n: 2 });
        const before = await s().get(q, a.id);
        await h.reopen();
        expect(await s().get(q, a.id)).to.deep.equal(before);
        const c = await post(q, { n: 3 });
        expect([await claimId(q), await claimId(q), await claimId(q)]).to.deep.equal([a.id, b, c]);
      });

      it('a claim survives a restart: status, attempts and the lease with its deadline', async () => {
        const q = queue({ leaseSeconds: 10 });
        const a = await post(q);
        await claimId(q);
        advance(5000);
        await h.reopen();
        expect(await s().get(q, a)).to.deep.include({ status: 'claimed', attempts: 1 });
        expect(await claimId(q)).to.equal(null);
        advance(4999);
        await h.reopen();
        expect(await status(q, a)).to.equal('claimed');
        advance(1);
        expect(await status(q, a)).to.equal('pending');
      });

      it('accepted progress survives a restart, with its extended lease', async () => {
        const q = queue({ leaseSeconds: 10 });
        const a = await post(q);
        await claimId(q);
        advance(8000);
        await s().progress(q, a, '{"percent":80}');
        await h.reopen();
        expect(await s().get(q, a)).to.deep.include({ status: 'processing', progress: '{"percent":80}', updatedAt: START + 8000 });
        advance(9999);
        expect(await status(q, a)).to.equal('processing');
        advance(1);
        expect(await status(q, a)).to.equal('pending');
      });

      it('a result survives a restart, and the item stays terminal', async () => {
        const q = queue();
        const a = await post(q);
        await claimId(q);
        await s().result(q, a, '{"output":"kept"}');
        const before = await s().get(q, a);
        await h.reopen();
        expect(await s().get(q, a)).to.deep.equal(before);
        expect(await s().result(q, a, '{}')).to.deep.equal({ accepted: false, status: 'finished' });
      });

      it('an error survives a restart: re-queued with its retry delay, or failed', async () => {
        const q = queue({ retryDelaySeconds: 10, maxAttempts: 2 });
        const a = await post(q);
        await claimId(q);
        await s().error(q, a, '{"e":1}');
        await h.reopen();
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', error: '{"e":1}', attempts: 1 });
        advance(9999);
        await h.reopen();
        expect(await claimId(q)).to.equal(null);
        advance(1);
        expect(await claimId(q)).to.equal(a);
        await s().error(q, a, '{"e":2}');
        await h.reopen();
        expect(await s().get(q, a)).to.deep.include({ status: 'failed', error: '{"e":2}', attempts: 2, finishedAt: START + 10_000 });
      });

      it('a cancel survives a restart', async () => {
        const q = queue();
        const a = await post(q);
        await s().cancel(q, a);
        await h.reopen();
        expect(await s().get(q, a)).to.deep.include({ status: 'cancelled', finishedAt: START });
        expect(await claimId(q)).to.equal(null);
      });

      it('the fetched stamp survives a restart (retention from "fetched")', async () => {
        const q = queue({ retainFrom: 'fetched', retainSeconds: 100 });
        const a = await post(q);
        await s().result(q, a, '{}');
        advance(1000);
        expect(await status(q, a)).to.equal('finished');
        await h.reopen();
        advance(99_999);
        await h.reopen();
        expect(await status(q, a)).to.equal('finished');
        advance(1);
        await h.reopen();
        expect(await s().get(q, a)).to.equal(null);
      });

      it('a lease that ended while the store was closed is applied at the reopen: re-queued, or failed on the last attempt', async () => {
        const q = queue({ leaseSeconds: 10, maxAttempts: 2 });
        const a = await post(q);
        const b = await post(q);
        await claimId(q);
        await claimId(q);
        await s().error(q, b, '{}');
        await claimId(q);
        await h.reopen(() => advance(60_000));
        expect(await s().get(q, a)).to.deep.include({ status: 'pending', attempts: 1, updatedAt: START + 60_000 });
        expect(await s().get(q, b)).to.deep.include({ status: 'failed', attempts: 2, error: LEASE_EXPIRED, finishedAt: START + 60_000 });
        expect(await claimId(q)).to.equal(a);
      });

      it('a purge survives a restart: the item stays gone, with its idempotency key, also under rules put since that would have kept it longer', async () => {
        let q = queue({ retainSeconds: 100 });
        const a = (await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'gone' })).id;
        await s().result(q, a, '{}');
        advance(100_000);
        expect(await s().get(q, a)).to.equal(null);
        q = redefine(q, { retainSeconds: 1000 });
        await h.reopen();
        expect(await s().get(q, a)).to.equal(null);
        expect(await s().counts(q)).to.deep.equal({});
        const again = await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'gone' });
        expect(again).to.deep.include({ status: 'pending', created: true });
        expect(again.id).to.not.equal(a);
      });

      it('idempotency keys survive a restart', async () => {
        const q = queue();
        const first = await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'once' });
        await h.reopen();
        expect(await s().post(q, { body: '{}', postedBy: 'p', idempotencyKey: 'once' })).to.deep.equal({ id: first.id, status: 'pending', created: false });
        expect(await s().counts(q)).to.deep.equal({ pending: 1 });
      });

      it('counts survive a restart, and a restart twice in a row loses nothing', async () => {
        const q = await mixedQueue();
        const counts = await s().counts(q);
        expect(counts).to.deep.equal({ failed: 1, processing: 1, cancelled: 1, pending: 2 });
        await h.reopen();
        await h.reopen();
        expect(await s().counts(q)).to.deep.equal(counts);
      });
    });

    describe('batches (decisions §3.8)', () => {
      it('postMany creates every item in order, claimed in that order', async () => {
        const q = queue();
        const out = await s().postMany(q, [0, 1, 2].map((i) => ({ body: JSON.stringify({ i }), postedBy: 'p' })));
        expect(out.map((o) => [o.status, o.created])).to.deep.equal([['pending', true], ['pending', true], ['pending', true]]);
        expect(new Set(out.map((o) => o.id)).size).to.equal(3);
        for (const o of out) expect(await claimId(q)).to.equal(o.id);
      });

      it('postMany honours idempotency keys against earlier items and within the batch', async () => {
        const q = queue();
        const earlier = await post(q, {}, 'K:0');
        const out = await s().postMany(q, [
          { body: '{}', postedBy: 'p', idempotencyKey: 'K:0' },
          { body: '{}', postedBy: 'p', idempotencyKey: 'K:1' },
          { body: '{}', postedBy: 'p', idempotencyKey: 'K:1' },
        ]);
        expect(out[0]).to.deep.equal({ id: earlier, status: 'pending', created: false });
        expect(out[1]!.created).to.equal(true);
        expect(out[2]).to.deep.equal({ id: out[1]!.id, status: 'pending', created: false });
        expect(await s().counts(q)).to.deep.equal({ pending: 2 });
      });

      it('postMany is durable: every item is back after a restart', async () => {
        const q = queue();
        const out = await s().postMany(q, [{ body: '{"a":1}', postedBy: 'p' }, { body: '{"a":2}', postedBy: 'p' }]);
        await h.reopen();
        expect(await status(q, out[0]!.id)).to.equal('pending');
        expect(await status(q, out[1]!.id)).to.equal('pending');
      });

      it('claimMany leases up to max items, oldest first, each once', async () => {
        const q = queue();
        const ids: string[] = [];
        for (let i = 0; i < 5; i++) ids.push(await post(q, { i }));
        const first = await s().claimMany(q, { worker: 'w1' }, 3);
        expect(first.map((c) => c.id)).to.deep.equal(ids.slice(0, 3));
        expect(first.every((c) => c.attempts === 1 && c.lease.worker === 'w1')).to.equal(true);
        const rest = await s().claimMany(q, { worker: 'w2' }, 3);
        expect(rest.map((c) => c.id)).to.deep.equal(ids.slice(3));
        expect(await s().claimMany(q, { worker: 'w3' }, 3)).to.deep.equal([]);
      });

      it('claimMany applies criteria and keeps FIFO among matching items', async () => {
        const q = queue();
        const ids: string[] = [];
        for (const kind of ['a', 'b', 'a', 'b', 'a']) ids.push(await post(q, { kind }));
        const got = await s().claimMany(q, { worker: 'w', criteria: { kind: 'a' } }, 10);
        expect(got.map((c) => c.id)).to.deep.equal([ids[0], ids[2], ids[4]]);
      });

      it('claimMany is durable: leases are back after a restart', async () => {
        const q = queue();
        await post(q);
        await post(q);
        const got = await s().claimMany(q, { worker: 'w' }, 2);
        await h.reopen();
        for (const c of got) expect(await status(q, c.id)).to.equal('claimed');
        expect(await claimId(q)).to.equal(null);
      });
    });

    describe('schedules (decisions §8.3)', () => {
      const every = (seconds: number, more: object = {}): QueueDefinition => ({ schedules: { tick: { every: seconds, item: { n: 1 }, ...more } } });
      async function scheduled(q: QueueRef): Promise<Array<{ id: string; postedBy: string; postedAt: number; priority: number; group: string | null; status: string }>> {
        const o = await s().overview(q, { oldest: 20, leases: 100 });
        const out = [];
        for (const { id } of o.oldest) {
          const r = (await s().get(q, id))!;
          out.push({ id, postedBy: r.postedBy, postedAt: r.postedAt, priority: r.priority, group: r.group, status: r.status });
        }
        return out;
      }

      it('a new schedule starts at its next occurrence; each occurrence posts one item, postedBy schedule:<name>, with its priority and group', async () => {
        const q = queue(every(10, { priority: 7, group: 'g' }));
        advance(500);
        expect(await s().tickSchedules(q)).to.equal(0);
        expect(await s().schedules(q)).to.deep.equal([{ name: 'tick', next: START + 10_000, last: null, lastId: null }]);
        advance(9_000);
        expect(await s().tickSchedules(q)).to.equal(0);
        advance(600);
        expect(await s().tickSchedules(q)).to.equal(1);
        expect(await s().tickSchedules(q)).to.equal(0);
        const items = await scheduled(q);
        expect(items).to.have.length(1);
        expect(items[0]).to.deep.include({ postedBy: 'schedule:tick', postedAt: START + 10_100, priority: 7, group: 'g', status: 'pending' });
        expect(await s().schedules(q)).to.deep.equal([{ name: 'tick', next: START + 20_000, last: START + 10_000, lastId: items[0]!.id }]);
        const claimed = await s().claim(q, { worker: 'w' });
        expect(claimed?.item).to.equal('{"n":1}');
      });

      it('two ticks at once post each occurrence once', async () => {
        const q = queue(every(1));
        await s().tickSchedules(q);
        advance(3_000);
        const posted = await Promise.all([s().tickSchedules(q), s().tickSchedules(q), s().tickSchedules(q)]);
        expect(posted.reduce((a, b) => a + b, 0)).to.equal(3);
        expect(await scheduled(q)).to.have.length(3);
      });

      it('the last occurrence survives a restart: no item twice; missed "once" posts one item for the occurrences that fell while closed', async () => {
        // Occurrences fall on multiples of 100 s since the epoch, as START is.
        const q = queue(every(100));
        await s().tickSchedules(q);
        advance(100_000);
        expect(await s().tickSchedules(q)).to.equal(1);
        await h.reopen();
        expect(await s().tickSchedules(q)).to.equal(0);
        await h.reopen(() => advance(3_600_000));
        // 35 missed (one item for them) and the one due now.
        expect(await s().tickSchedules(q)).to.equal(2);
        expect((await s().schedules(q))[0]!.last).to.equal(START + 3_700_000);
        expect(await scheduled(q)).to.have.length(3);
      });

      it('missed "skip" posts none of the occurrences that fell while closed, "all" each of them', async () => {
        const skip = queue(every(100, { missed: 'skip' }));
        const all = queue(every(100, { missed: 'all' }));
        await Promise.all([s().tickSchedules(skip), s().tickSchedules(all)]);
        await h.reopen(() => advance(1_030_000));
        expect(await s().tickSchedules(skip)).to.equal(0);
        expect(await s().tickSchedules(all)).to.equal(10);
        expect((await s().schedules(skip))[0]).to.deep.include({ next: START + 1_100_000, last: null });
        expect((await s().schedules(all))[0]).to.deep.include({ next: START + 1_100_000, last: START + 1_000_000 });
      });

      it('overlap "skip": no item while the previous one is not terminal, and the occurrence passes', async () => {
        const q = queue(every(1, { overlap: 'skip' }));
        await s().tickSchedules(q);
        advance(1_000);
        expect(await s().tickSchedules(q)).to.equal(1);
        const first = (await scheduled(q))[0]!.id;
        advance(1_000);
        expect(await s().tickSchedules(q)).to.equal(0);
        await s().claim(q, { worker: 'w' });
        await s().result(q, first, '{}');
        expect(await s().tickSchedules(q)).to.equal(0);
        advance(1_000);
        expect(await s().tickSchedules(q)).to.equal(1);
        expect((await s().schedules(q))[0]).to.deep.include({ last: START + 3_000 });
      });

      it('a changed schedule starts at its next occurrence after the change; a deleted one is forgotten', async () => {
        let q = queue(every(10));
        await s().tickSchedules(q);
        advance(10_000);
        expect(await s().tickSchedules(q)).to.equal(1);
        advance(5_000);
        q = redefine(q, every(10, { item: { n: 2 } }));
        advance(5_000);
        // The change comes with an occurrence due: it starts afresh, from now, and posts nothing.
        expect(await s().tickSchedules(q)).to.equal(0);
        advance(10_000);
        expect(await s().tickSchedules(q)).to.equal(1);
        q = redefine(q, {});
        expect(await s().tickSchedules(q)).to.equal(0);
        expect(await s().schedules(q)).to.deep.equal([]);
        q = redefine(q, every(10));
        advance(30_000);
        expect(await s().tickSchedules(q)).to.equal(0);
        expect((await s().schedules(q))[0]).to.deep.include({ last: null, lastId: null });
      });
    });

    describe('operators (decisions §5.1)', () => {
      it('overview counts every status, kept as items change', async () => {
        const q = await mixedQueue();
        const o = await s().overview(q, { oldest: 20, leases: 100 });
        expect(o.counts).to.deep.equal({ pending: 2, claimed: 0, processing: 1, finished: 0, failed: 1, timedout: 0, cancelled: 1 });
        await h.reopen();
        expect((await s().overview(q, { oldest: 0, leases: 0 })).counts).to.deep.equal(o.counts);
      });

      it('overview counts leave out a purged item, and count a lease that ended as pending again (decisions §2.2, §3.2, §5.1)', async () => {
        const q = queue({ retainSeconds: 100, leaseSeconds: 50 });
        const a = await post(q);
        const b = await post(q);
        await s().result(q, a, '{}');
        expect(await claimId(q)).to.equal(b);
        advance(100_000);
        expect(await s().get(q, a)).to.equal(null);
        expect(await status(q, b)).to.equal('pending');
        const counts = { pending: 1, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 };
        expect((await s().overview(q, { oldest: 0, leases: 0 })).counts).to.deep.equal(counts);
        await h.reopen();
        expect((await s().overview(q, { oldest: 0, leases: 0 })).counts).to.deep.equal(counts);
      });

      it('overview lists the oldest pending items, oldest first, and their age', async () => {
        const q = queue();
        const ids: string[] = [];
        for (let i = 0; i < 4; i++) {
          ids.push(await post(q, { i }));
          advance(1000);
        }
        await claimId(q);
        const o = await s().overview(q, { oldest: 2, leases: 0 });
        expect(o.oldest).to.deep.equal([
          { id: ids[1], postedAt: START + 1000, attempts: 0 },
          { id: ids[2], postedAt: START + 2000, attempts: 0 },
        ]);
        expect(o.oldestPendingAt).to.equal(START + 1000);
        expect(o.leases).to.deep.equal([]);
      });

      it('overview counts an item waiting out its retry delay as pending, and lists it', async () => {
        const q = queue({ retryDelaySeconds: 60 });
        const id = await post(q);
        advance(1000);
        await post(q);
        await claimId(q);
        await s().error(q, id, '{}');
        const o = await s().overview(q, { oldest: 20, leases: 0 });
        expect(o.counts.pending).to.equal(2);
        expect(o.oldest.map((e) => e.id)[0]).to.equal(id);
        expect(o.oldest[0]!.attempts).to.equal(1);
        expect(o.oldestPendingAt).to.equal(START);
      });

      it('overview lists current leases, soonest end first, with worker and attempts', async () => {
        const q = queue({ leaseSeconds: 30 });
        const a = await post(q);
        const b = await post(q);
        await claimId(q, undefined, 'wa');
        advance(1000);
        await claimId(q, undefined, 'wb');
        advance(1000);
        await s().progress(q, a, '{}');
        const o = await s().overview(q, { oldest: 20, leases: 100 });
        expect(o.leases).to.deep.equal([
          { id: b, worker: 'wb', until: START + 1000 + 30_000, attempts: 1 },
          { id: a, worker: 'wa', until: START + 2000 + 30_000, attempts: 1 },
        ]);
        await s().result(q, b, '{}');
        expect((await s().overview(q, { oldest: 20, leases: 1 })).leases.map((l) => l.id)).to.deep.equal([a]);
        expect((await s().overview(q, { oldest: 20, leases: 100 })).oldestPendingAt).to.equal(null);
      });

      it('overview of a queue that holds nothing is all zeros', async () => {
        const o = await s().overview(queue(), { oldest: 20, leases: 100 });
        expect(o).to.deep.equal({ paused: false, counts: { pending: 0, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 }, oldestPendingAt: null, oldest: [], leases: [], groupsWaiting: null, callbacks: { owed: 0, failing: 0 } });
      });
    });

    limitsConformance({ h: () => h, queue, redefine });
    deadLetterConformance({ h: () => h, queue, post, claimId: (q) => claimId(q), advance });
    callbackConformance({ h: () => h, queue, post, claimId: (q) => claimId(q), advance });
  });
}

conformance('embedded', embedded);
conformance('model', model);
// PostgreSQL when SVCQ_TEST_PG_URL names a server that answers; otherwise shown as skipped, with why.
const pg = await (await import('./support/stores.js')).postgresUnderTest();
conformance('postgres', 'factory' in pg ? pg.factory : null, 'whyNot' in pg ? pg.whyNot : undefined);
