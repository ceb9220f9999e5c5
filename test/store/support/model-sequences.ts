import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { resolveQueue, type QueueConfig } from '../../../src/engine/config.js';
import type { Criteria } from '../../../src/engine/criteria.js';
import type { QueueDefinition } from '../../../src/definitions/schemas.js';
import type { ClaimHold } from '../../../src/engine/limits.js';
import type { PostOptions, RetryWish } from '../../../src/engine/rules.js';
import type { BulkAction, QueueRef, StatusRecord } from '../../../src/store/store.js';
import type { ItemStatus } from '../../../src/engine/item.js';
import { FakeClock, model, START, type StoreFactory, type StoreUnderTest } from './stores.js';

/**
 * The sequences of test/store/model-based.test.ts (the embedded store) and
 * model-based-postgres.test.ts (PostgreSQL), two files so that they run on two workers at once.
 *
 * The real stores against the reference model: random sequences of operations run on a store and
 * on the model side by side, on one fake clock, and everything a caller would see is compared
 * (ids, which are random, are compared by the order the items were posted in). fast-check shrinks
 * a difference to a minimal sequence. `SVCQ_FC_RUNS=N` runs N sequences against the embedded
 * store instead of the default; `SVCQ_FC_PG_RUNS=N` at least N against PostgreSQL, as many
 * beginning from each definition ({@link fromEach}), the rest of every sequence drawn at random:
 * by default one from each definition, where the embedded store runs 300. Each PostgreSQL
 * sequence has a database of its own and every restart reconnects, a second or more for what the
 * embedded store does in milliseconds.
 */

export const RUNS = Number(process.env.SVCQ_FC_RUNS ?? 300);
export const MAX_COMMANDS = 40;
const UNKNOWN_ID = '0000000000000000';

/** Rules small enough that leases, retry delays, timeouts and retention all come due within a sequence. */
const DEFINITIONS: QueueDefinition[] = [
  { leaseSeconds: 10, maxAttempts: 2 },
  { leaseSeconds: 5, maxAttempts: 1, retainSeconds: 30 },
  { leaseSeconds: 10, maxAttempts: 3, retryDelaySeconds: 7, timeoutSeconds: 60, retainSeconds: 20 },
  { leaseSeconds: 20, maxAttempts: 2, retainFrom: 'fetched', retainSeconds: 15 },
  { leaseSeconds: 3, maxAttempts: 4, retryDelaySeconds: 2, timeoutSeconds: 25, retainFrom: 'fetched', retainSeconds: 5 },
  // Every deadline at least 25 s out: the PostgreSQL store skips sweeping such a queue between
  // deadlines (its quiet window), and sends a transaction's statements without waiting for its
  // submissions' answers where nothing can be due.
  { leaseSeconds: 30, maxAttempts: 3 },
  { leaseSeconds: 45, maxAttempts: 2, retryDelaySeconds: 25, retainSeconds: 40 },
  // Purged the moment they end (or are fetched ended): a result folded with later calls of its
  // turn, a post with its idempotency key, a fetch of the ended item, all meet it gone.
  { leaseSeconds: 10, maxAttempts: 2, retainSeconds: 0 },
  { leaseSeconds: 5, maxAttempts: 3, retryDelaySeconds: 3, retainFrom: 'fetched', retainSeconds: 0 },
  // Backoff (decisions §8.2): doubling delays, capped. Without jitter: a jittered delay is drawn
  // from the item's id, and the two sides give their items different ids (the conformance suite
  // holds each store's jitter to rules.retryDelay).
  { leaseSeconds: 5, maxAttempts: 4, retryDelaySeconds: 2, retryBackoff: 'exponential', retryDelayMaxSeconds: 10 },
  { leaseSeconds: 30, maxAttempts: 3, retryDelaySeconds: 30, retryBackoff: 'exponential' },
  // Schedules (decisions §8.3), ticked by the `tick` command: every policy of missed and overlap.
  { leaseSeconds: 10, maxAttempts: 2, retainSeconds: 20, schedules: { beat: { every: 1, item: { kind: 'a' }, missed: 'all' }, slow: { every: 7, item: { kind: 'b', n: 2 }, priority: 1, overlap: 'skip' } } },
  { leaseSeconds: 5, maxAttempts: 2, schedules: { once: { every: 3, missed: 'once', item: { kind: 'c' } }, skip: { every: 2, missed: 'skip', overlap: 'skip', group: 'g1' } } },
  // Flow control (decisions §8.5): limits that bind within a sequence, alone and together, and
  // turns among the groups the posts carry; windows of a few seconds, which the clock moves past.
  { leaseSeconds: 10, maxAttempts: 2, maxActive: 2 },
  { leaseSeconds: 10, maxAttempts: 3, retryDelaySeconds: 2, groupMaxActive: 1 },
  { leaseSeconds: 5, maxAttempts: 2, rateLimit: { max: 2, perSeconds: 3 } },
  { leaseSeconds: 10, maxAttempts: 2, fairness: 'groups' },
  { leaseSeconds: 10, maxAttempts: 3, fairness: 'groups', groupMaxActive: 1, maxActive: 3, rateLimit: { max: 3, perSeconds: 5 } },
  // Callbacks (decisions §9.2): every way an item ends owes one (the overviews compare how many),
  // and an item a callback is owed for outlives its retention (the callbacks are never settled here).
  { leaseSeconds: 5, maxAttempts: 2, timeoutSeconds: 20, retainSeconds: 3, callback: 'http://127.0.0.1:9/hook' },
];
export const CONFIGS: QueueConfig[] = DEFINITIONS.map((def) => resolveQueue(def));
export const PG_RUNS = Number(process.env.SVCQ_FC_PG_RUNS ?? CONFIGS.length);
/** The definitions whose items are purged the moment they end (retainSeconds 0). */
export const PURGED_AT_ONCE: number[] = DEFINITIONS.flatMap((def, n) => (def.retainSeconds === 0 ? [n] : []));
/** PostgreSQL's sequences on those definitions (five from each by default): they have two to begin from. */
export const PURGED_RUNS = Math.ceil(PG_RUNS / 2);

/** How many sequences {@link fromEach} runs for `runs` from `initials`: at least one from each. */
export function fromEachRuns(runs: number, initials: readonly unknown[] = CONFIGS): number {
  return Math.max(1, Math.ceil(runs / initials.length)) * initials.length;
}

/**
 * Checks `run` over at least `runs` random sequences, as many beginning from each definition of
 * `initials` (every definition, unless told): a few runs of a slow store still begin once from
 * each, where a first definition drawn at random would leave some out. Each is a property of its
 * own, so fast-check prints the seed and the shrunk sequence of the one that fails.
 *
 * With `endBy` (a time, as Date.now gives it, before the test's own timeout): a sequence that has
 * not ended after `sequenceMs` fails as any other failure, and the search for a shorter failing
 * sequence stops at `endBy`, so that the failure is reported with the sequence found so far
 * rather than lost in the test's timeout (on PostgreSQL every sequence tried makes a database).
 */
export async function fromEach<C>(
  runs: number,
  commands: fc.Arbitrary<C[]>,
  run: (initial: number, commands: C[]) => Promise<void>,
  initials: readonly number[] = CONFIGS.map((_, n) => n),
  limits?: { endBy: number; sequenceMs: number },
): Promise<void> {
  const each = fromEachRuns(runs, initials) / initials.length;
  for (const initial of initials) {
    const bounded = limits ? { timeout: limits.sequenceMs, interruptAfterTimeLimit: Math.max(1000, limits.endBy - Date.now()), markInterruptAsFailure: true } : {};
    await fc.assert(fc.asyncProperty(fc.constant(initial), commands, run), { numRuns: each, ...bounded });
  }
}

const CRITERIA: Array<Criteria | undefined> = [
  undefined,
  {},
  { kind: 'a' },
  { kind: { ne: 'a' } },
  { n: { gte: 2 } },
  { n: { lt: 2 }, kind: 'b' },
  { n: { in: [0, 3] } },
  { kind: { in: ['a', 'b'] } },
  { missing: 1 },
];

type Command =
  | { op: 'post'; kind: string; n: number | null; key: string | null; options: PostOptions | null }
  | { op: 'claim'; criteria: number; worker: string }
  | { op: 'postMany'; items: Array<{ kind: string; key: string | null }>; options: PostOptions | null }
  | { op: 'claimMany'; criteria: number; worker: string; max: number }
  | { op: 'overview' }
  | { op: 'progress' | 'result' | 'error' | 'cancel' | 'get'; item: number }
  | { op: 'counts' }
  | { op: 'advance'; ms: number }
  | { op: 'define'; config: number }
  | { op: 'restart'; closedMs: number }
  | { op: 'pause'; paused: boolean }
  | { op: 'errorWish'; item: number; wish: RetryWish }
  | { op: 'release'; item: number; delay: number }
  | { op: 'tick' };

const durations = fc.oneof(fc.constantFrom(1, 999, 1000, 2000, 3000, 5000, 7000, 10_000, 15_000, 20_000, 25_000, 30_000, 60_000), fc.integer({ min: 1, max: 70_000 }));
const item = fc.nat({ max: 12 });
/** Post options (decisions §8.1): a few priorities, delays around the durations the clock moves by, a time, a group. */
const postOptions: fc.Arbitrary<PostOptions | null> = fc.option(
  fc.oneof(
    fc.record({ priority: fc.constantFrom(-2, 0, 1, 5), delaySeconds: fc.constantFrom(0, 1, 2, 5, 30), group: fc.constantFrom('g1', 'g2') }, { requiredKeys: [] }),
    // A group alone, as most posts to a queue with fairness or groupMaxActive carry one (decisions §8.5).
    fc.record({ group: fc.constantFrom('g1', 'g2', 'g3') }),
    fc.record({ at: fc.constantFrom(START - 1000, START + 3000, START + 20_000), priority: fc.constantFrom(-2, 1) }, { requiredKeys: ['at'] }),
  ),
  { freq: 2 },
);

/** A worker's wish for one failure (decisions §8.2). */
const retryWish: fc.Arbitrary<RetryWish> = fc.oneof(fc.record({ retryIn: fc.constantFrom(0, 1, 3, 30) }), fc.constant({ final: true }));

export const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant('post' as const), kind: fc.constantFrom('a', 'b', 'c'), n: fc.option(fc.nat({ max: 3 })), key: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { freq: 3 }), options: postOptions }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('claim' as const), criteria: fc.nat({ max: CRITERIA.length - 1 }), worker: fc.constantFrom('w1', 'w2') }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constantFrom('progress' as const, 'result' as const, 'error' as const, 'cancel' as const, 'get' as const), item }) },
  { weight: 1, arbitrary: fc.constant({ op: 'counts' as const }) },
  // Batches (decisions §3.8) and the operators' view (§5.1).
  { weight: 2, arbitrary: fc.record({ op: fc.constant('postMany' as const), items: fc.array(fc.record({ kind: fc.constantFrom('a', 'b', 'c'), key: fc.option(fc.constantFrom('k1', 'k2', 'k4'), { freq: 3 }) }), { minLength: 1, maxLength: 4 }), options: postOptions }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('claimMany' as const), criteria: fc.nat({ max: CRITERIA.length - 1 }), worker: fc.constantFrom('w1', 'w2'), max: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 1, arbitrary: fc.constant({ op: 'overview' as const }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: durations }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('define' as const), config: fc.nat({ max: CONFIGS.length - 1 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('restart' as const), closedMs: fc.oneof(fc.constant(0), durations) }) },
  // Pause and resume (decisions §8.4): claims then find nothing while everything else goes on.
  // Resumes twice as often as pauses, so that a sequence does not spend most of its claims paused.
  { weight: 1, arbitrary: fc.record({ op: fc.constant('pause' as const), paused: fc.constantFrom(true, false, false) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('errorWish' as const), item, wish: retryWish }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), item, delay: fc.constantFrom(0, 0, 2, 30) }) },
  // A schedule tick under the clock as it stands (decisions §8.3): what a node's ticker calls.
  { weight: 2, arbitrary: fc.constant({ op: 'tick' as const }) },
);

/**
 * A call of a turn: one of the commands a request makes, on one of two queues. A turn's calls are
 * made all at once on the store under test (one turn of its event loop: the PostgreSQL store folds
 * them into one transaction) and one by one on the model, in the order the fold runs them.
 */
interface TurnCall {
  queue: number;
  c:
    | Extract<Command, { op: 'post' | 'claim' | 'postMany' | 'claimMany' | 'pause' | 'errorWish' | 'release' }>
    | { op: 'progress' | 'result' | 'error' | 'cancel'; item: number };
}

const turnCall: fc.Arbitrary<TurnCall> = fc.record({
  queue: fc.nat({ max: 1 }),
  c: fc.oneof(
    { weight: 4, arbitrary: fc.record({ op: fc.constant('post' as const), kind: fc.constantFrom('a', 'b', 'c'), n: fc.option(fc.nat({ max: 3 })), key: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { freq: 3 }), options: postOptions }) },
    // Mostly without criteria: those are the claims a fold groups.
    { weight: 4, arbitrary: fc.record({ op: fc.constant('claim' as const), criteria: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat({ max: CRITERIA.length - 1 }) }), worker: fc.constantFrom('w1', 'w2') }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('postMany' as const), items: fc.array(fc.record({ kind: fc.constantFrom('a', 'b', 'c'), key: fc.option(fc.constantFrom('k1', 'k2', 'k4'), { freq: 3 }) }), { minLength: 1, maxLength: 3 }), options: postOptions }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('claimMany' as const), criteria: fc.constant(0), worker: fc.constantFrom('w1', 'w2'), max: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 6, arbitrary: fc.record({ op: fc.constantFrom('progress' as const, 'result' as const, 'error' as const, 'cancel' as const), item }) },
    // A pause or a resume in the transaction of the claims around it.
    { weight: 1, arbitrary: fc.record({ op: fc.constant('pause' as const), paused: fc.boolean() }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('errorWish' as const), item, wish: retryWish }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('release' as const), item, delay: fc.constantFrom(0, 2, 30) }) },
  ),
});

export type TurnCommand = { op: 'turn'; calls: TurnCall[] } | { op: 'advance'; ms: number } | { op: 'define'; config: number };

export const turnCommand: fc.Arbitrary<TurnCommand> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ op: fc.constant('turn' as const), calls: fc.array(turnCall, { minLength: 1, maxLength: 8 }) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: durations }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('define' as const), config: fc.nat({ max: CONFIGS.length - 1 }) }) },
);

/**
 * The order a fold runs a turn's calls in (decisions §6: postgres-store.ts, runFold): posts, plain
 * claims and submissions of one queue as one group each, where the first of them stood; anything
 * else (a claim with criteria) on its own, where it stood.
 */
function foldOrder(calls: readonly TurnCall[]): number[] {
  const groupOf = (call: TurnCall): string | null => {
    const c = call.c;
    if (c.op === 'post' || c.op === 'postMany') return `post ${call.queue}`;
    if ((c.op === 'claim' || c.op === 'claimMany') && CRITERIA[c.criteria] === undefined) return `claim ${call.queue}`;
    if (c.op === 'progress' || c.op === 'result' || c.op === 'error' || c.op === 'cancel' || c.op === 'errorWish' || c.op === 'release') return `submit ${call.queue}`;
    return null;
  };
  const order: number[] = [];
  const done = new Set<string>();
  calls.forEach((call, i) => {
    const key = groupOf(call);
    if (key === null) return void order.push(i);
    if (done.has(key)) return;
    done.add(key);
    calls.forEach((other, j) => {
      if (groupOf(other) === key) order.push(j);
    });
  });
  return order;
}

/** One call's raw answer (real ids), started now; `id` is the item it names, chosen before the turn. */
function start(side: Side, q: QueueRef, c: TurnCall['c'], id: string, tag: string): Promise<unknown> {
  const store = side.h.store;
  switch (c.op) {
    case 'post':
      return store.post(q, { body: JSON.stringify(c.n === null ? { kind: c.kind } : { kind: c.kind, n: c.n }), postedBy: 'producer', idempotencyKey: c.key ?? undefined, options: c.options ?? undefined });
    case 'postMany':
      return store.postMany(q, c.items.map((i) => ({ body: JSON.stringify({ kind: i.kind }), postedBy: 'producer', idempotencyKey: i.key ?? undefined, options: c.options ?? undefined })));
    case 'claim':
      return store.claim(q, { worker: c.worker, criteria: CRITERIA[c.criteria] });
    case 'claimMany':
      return store.claimMany(q, { worker: c.worker, criteria: CRITERIA[c.criteria] }, c.max);
    case 'cancel':
      return store.cancel(q, id);
    case 'pause':
      return store.setPaused(q, c.paused);
    case 'errorWish':
      return store.error(q, id, `{"error":"${tag}"}`, c.wish);
    case 'release':
      return store.release(q, id, c.delay);
    case 'progress':
    case 'result':
    case 'error':
      return store[c.op](q, id, `{"${c.op}":"${tag}"}`);
  }
}

/** Registers the items a raw answer says were created, in its order. */
function register(side: Side, raw: unknown): void {
  for (const out of Array.isArray(raw) ? raw : [raw]) {
    if (out !== null && typeof out === 'object' && (out as { created?: boolean }).created === true) side.ids.push((out as { id: string }).id);
  }
}

/** What a caller sees of a raw answer: ids as labels (the items it created registered first). */
function labeled(side: Side, raw: unknown): unknown {
  if (Array.isArray(raw)) return raw.map((x) => labeled(side, x));
  if (raw !== null && typeof raw === 'object' && 'id' in raw) return { ...raw, id: label(side, (raw as { id: string }).id) };
  return raw;
}

/**
 * What a caller of a turn sees, compared. A post whose idempotency key names an earlier item is
 * compared without that item's status: the fold reads it from the table, where the changes other
 * calls of the same turn made to it are not written yet, so it answers as if it came first among
 * them (which concurrent calls allow); the model, running the calls one by one, answers as if in
 * its place.
 */
function seenOf(side: Side, raw: unknown): unknown {
  const seen = labeled(side, raw);
  const relax = (x: unknown): unknown => {
    if (x === null || typeof x !== 'object' || (x as { created?: boolean }).created !== false) return x;
    const { status: _status, ...rest } = x as Record<string, unknown>;
    return rest;
  };
  return Array.isArray(seen) ? seen.map(relax) : relax(seen);
}

/** Runs a turn on both sides and compares what every caller sees. */
async function turn(sides: Side[], queues: readonly QueueRef[], calls: readonly TurnCall[], step: number, subject: string): Promise<void> {
  const order = foldOrder(calls);
  const seen: unknown[][] = [];
  for (const [s, side] of sides.entries()) {
    // Items named by their place among those posted before the turn, on both sides alike.
    const ids = calls.map((call) => ('item' in call.c ? idFor(side, call.c.item as number) : UNKNOWN_ID));
    const go = (i: number): Promise<unknown> => start(side, queues[calls[i]!.queue]!, calls[i]!.c, ids[i]!, `${step}.${i}`);
    const raws: unknown[] = new Array(calls.length);
    if (s === 0) {
      const all = await Promise.all(calls.map((_, i) => go(i)));
      all.forEach((r, i) => (raws[i] = r));
    } else {
      for (const i of order) raws[i] = await go(i);
    }
    for (const i of order) register(side, raws[i]);
    seen.push(calls.map((_, i) => seenOf(side, raws[i])));
  }
  if (!isDeepStrictEqual(seen[0], seen[1])) {
    throw new Error(`step ${step} turn ${JSON.stringify(calls)} (run as ${order.join(', ')}): the ${subject} store answered ${JSON.stringify(seen[0])}, the model ${JSON.stringify(seen[1])}`);
  }
}

export async function turns(subject: { name: string; factory: StoreFactory }, initial: number, commands: TurnCommand[]): Promise<void> {
  const clock = new FakeClock();
  let config = CONFIGS[initial]!;
  const configFor = (): QueueConfig => config;
  const refs = (): QueueRef[] => ['q', 'r'].map((name) => ({ key: `model.example.com/${name}`, host: 'model.example.com', name, config }));
  let queues = refs();
  const sides: Side[] = [
    { name: subject.name, h: await subject.factory({ configFor, clock }), ids: [] },
    { name: 'model', h: await model({ configFor, clock }), ids: [] },
  ];
  try {
    for (const [step, c] of commands.entries()) {
      if (c.op === 'turn') await turn(sides, queues, c.calls, step, subject.name);
      else {
        if (c.op === 'advance') clock.advance(c.ms);
        else {
          config = CONFIGS[c.config]!;
          queues = refs();
        }
        for (const q of queues) await touch(sides, q);
      }
    }
  } finally {
    for (const side of sides) await side.h.dispose();
  }
}

/** One store under test and the ids it gave, in posting order. */
interface Side {
  name: string;
  h: StoreUnderTest;
  ids: string[];
}

/** An id as the sequence knows it: the n-th item created, or "unknown". */
function label(side: Side, id: string): number | string {
  const i = side.ids.indexOf(id);
  return i === -1 ? `unknown ${id}` : i;
}

function idFor(side: Side, n: number): string {
  // One past the items posted so far names an id the queue does not hold.
  const i = n % (side.ids.length + 1);
  return i === side.ids.length ? UNKNOWN_ID : side.ids[i]!;
}

function shown(side: Side, r: StatusRecord | null): unknown {
  return r === null ? null : { ...r, id: label(side, r.id) };
}

/** Runs one command on one side and returns what its caller sees. */
async function run(side: Side, q: QueueRef, c: Command, step: number): Promise<unknown> {
  const store = side.h.store;
  switch (c.op) {
    case 'overview': {
      const o = await store.overview(q, { oldest: 5, leases: 5 });
      return { ...o, oldest: o.oldest.map((x) => ({ ...x, id: label(side, x.id) })), leases: o.leases.map((x) => ({ ...x, id: label(side, x.id) })) };
    }
    case 'get':
      return shown(side, await store.get(q, idFor(side, c.item)));
    case 'tick': {
      const posted = await store.tickSchedules(q);
      // The items it posted are labelled in claim order, as the pending list shows them.
      const o = await store.overview(q, { oldest: 100_000, leases: 0 });
      for (const x of o.oldest) if (!side.ids.includes(x.id)) side.ids.push(x.id);
      const views = await store.schedules(q);
      return { posted, views: views.map((v) => ({ ...v, lastId: v.lastId === null ? null : label(side, v.lastId) })) };
    }
    case 'counts':
      return store.counts(q);
    case 'claim':
    case 'claimMany': {
      // What held the claim back (decisions §8.5), compared too.
      const held: ClaimHold = {};
      const criteria = CRITERIA[c.criteria];
      const raw = c.op === 'claim' ? await store.claim(q, { worker: c.worker, criteria, held }) : await store.claimMany(q, { worker: c.worker, criteria, held }, c.max);
      return { claimed: labeled(side, raw), held };
    }
    case 'post':
    case 'postMany':
    case 'progress':
    case 'result':
    case 'error':
    case 'cancel':
    case 'errorWish':
    case 'release':
    case 'pause': {
      // Every command a request makes but a read (answered above).
      const raw = await start(side, q, c as TurnCall['c'], 'item' in c ? idFor(side, c.item) : UNKNOWN_ID, String(step));
      register(side, raw);
      return labeled(side, raw);
    }
    default:
      return undefined;
  }
}

/**
 * A request with nothing to do but apply what is due, on both sides. The embedded store (by
 * timers) and the PostgreSQL store (by its periodic sweep) also apply deadlines at moments the
 * fake clock does not control; after every change of time, rules or process the test lets a
 * request apply what is due under the rules in force, so that the later timers find nothing left
 * and both stores answer the same whatever they do.
 */
/** After the clock moved: each store applies what is due now, as its timers or its sweep would. */
async function touch(sides: Side[], q: QueueRef): Promise<void> {
  for (const side of sides) {
    if (side.h.settle) await side.h.settle();
    else await side.h.store.get(q, UNKNOWN_ID);
  }
}

export async function sequence(subject: { name: string; factory: StoreFactory }, initial: number, commands: Command[]): Promise<void> {
  const clock = new FakeClock();
  let config = CONFIGS[initial]!;
  const configFor = (): QueueConfig => config;
  let q: QueueRef = { key: 'model.example.com/q', host: 'model.example.com', name: 'q', config };
  const sides: Side[] = [
    { name: subject.name, h: await subject.factory({ configFor, clock }), ids: [] },
    { name: 'model', h: await model({ configFor, clock }), ids: [] },
  ];
  try {
    for (const [step, c] of commands.entries()) {
      if (c.op === 'advance') {
        clock.advance(c.ms);
        await touch(sides, q);
        continue;
      }
      if (c.op === 'define') {
        config = CONFIGS[c.config]!;
        q = { ...q, config };
        await touch(sides, q);
        continue;
      }
      if (c.op === 'restart') {
        // Time passes while the store is down; the model does nothing between requests anyway.
        await sides[0]!.h.reopen(() => clock.advance(c.closedMs));
        await sides[1]!.h.reopen();
        await touch(sides, q);
        continue;
      }
      const seen = [];
      for (const side of sides) seen.push(await run(side, q, c, step));
      if (!isDeepStrictEqual(seen[0], seen[1])) {
        throw new Error(`step ${step} ${JSON.stringify(c)}: the ${subject.name} store answered ${JSON.stringify(seen[0])}, the model ${JSON.stringify(seen[1])}`);
      }
    }
  } finally {
    for (const side of sides) await side.h.dispose();
  }
}

/**
 * decisions §8.6: a queue `q` whose failed and timed-out items are copied to `dl`, and the bulk
 * actions on both, against the model. Items the stores create on their own (dead-letter copies,
 * redriven items) are labelled as they appear among the pending items, in claim order, after each
 * command, alike on both sides.
 */
type DeadLetterCommand =
  | { op: 'base'; c: Command }
  | { op: 'dlClaim'; worker: string }
  | { op: 'dlGet'; item: number }
  | { op: 'dlCounts' }
  | { op: 'dlError'; item: number }
  | { op: 'dlDefined'; defined: boolean }
  | { op: 'fail'; kind: string }
  | { op: 'bulk'; queue: number; kind: 'redrive' | 'retry' | 'cancel'; statuses: ItemStatus[]; max: number };

export const deadLetterCommand: fc.Arbitrary<DeadLetterCommand> = fc.oneof(
  { weight: 10, arbitrary: command.map((c) => ({ op: 'base' as const, c })) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('dlClaim' as const), worker: fc.constantFrom('w1', 'w2') }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('dlGet' as const), item }) },
  { weight: 1, arbitrary: fc.constant({ op: 'dlCounts' as const }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('dlError' as const), item }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('dlDefined' as const), defined: fc.constantFrom(true, true, false) }) },
  // A post, a claim and a final error on what it claimed: a failure, so that copies are made often.
  { weight: 3, arbitrary: fc.record({ op: fc.constant('fail' as const), kind: fc.constantFrom('a', 'b') }) },
  {
    weight: 3,
    arbitrary: fc.oneof(
      fc.record({ op: fc.constant('bulk' as const), queue: fc.nat({ max: 1 }), kind: fc.constant('redrive' as const), statuses: fc.constant([] as ItemStatus[]), max: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ op: fc.constant('bulk' as const), queue: fc.nat({ max: 1 }), kind: fc.constant('retry' as const), statuses: fc.subarray(['failed', 'timedout', 'cancelled'] as ItemStatus[], { minLength: 1 }), max: fc.integer({ min: 1, max: 3 }) }),
      fc.record({ op: fc.constant('bulk' as const), queue: fc.nat({ max: 1 }), kind: fc.constant('cancel' as const), statuses: fc.subarray(['pending', 'claimed', 'processing'] as ItemStatus[], { minLength: 1 }), max: fc.integer({ min: 1, max: 3 }) }),
    ),
  },
);

const DEAD_LETTER_CONFIG = resolveQueue({ leaseSeconds: 10, maxAttempts: 1 });
/** Fewer sequences than the suites above: these add their commands to the same base commands. */
export const DL_RUNS = Math.ceil(RUNS / 3);
export const DL_PG_RUNS = Math.ceil(PG_RUNS / 2);

/** A status record with the ids it names (its own, its copy's, its source's) as labels. */
function shownLinked(side: Side, r: StatusRecord | null): unknown {
  if (r === null) return null;
  const out: Record<string, unknown> = { ...r, id: label(side, r.id) };
  if (r.deadLetterId !== undefined) out.deadLetterId = label(side, r.deadLetterId);
  if (r.source !== undefined) out.source = { ...r.source, id: label(side, r.source.id) };
  return out;
}

/** Labels the pending items of these queues not seen yet, in claim order (the copies and redriven items a command made). */
async function registerMade(side: Side, queues: readonly QueueRef[]): Promise<void> {
  for (const q of queues) {
    const o = await side.h.store.overview(q, { oldest: 100_000, leases: 0 });
    for (const x of o.oldest) if (!side.ids.includes(x.id)) side.ids.push(x.id);
  }
}

export async function deadLetterSequence(subject: { name: string; factory: StoreFactory }, initial: number, commands: DeadLetterCommand[]): Promise<void> {
  const clock = new FakeClock();
  const host = 'model.example.com';
  // One attempt: most errors and lease ends fail their item, so that copies are made often.
  let config: QueueConfig = { ...CONFIGS[initial]!, maxAttempts: 1, deadLetter: 'dl' };
  let dlDefined = true;
  const configFor = (key: string): QueueConfig | undefined => (key.endsWith('/dl') ? (dlDefined ? DEAD_LETTER_CONFIG : undefined) : config);
  let q: QueueRef = { key: `${host}/q`, host, name: 'q', config };
  const dl: QueueRef = { key: `${host}/dl`, host, name: 'dl', config: DEAD_LETTER_CONFIG };
  const sides: Side[] = [
    { name: subject.name, h: await subject.factory({ configFor, clock }), ids: [] },
    { name: 'model', h: await model({ configFor, clock }), ids: [] },
  ];
  const touchBoth = async (): Promise<void> => {
    await touch(sides, q);
    await touch(sides, dl);
  };
  try {
    for (const [step, d] of commands.entries()) {
      if (d.op === 'base' && (d.c.op === 'advance' || d.c.op === 'define' || d.c.op === 'restart')) {
        const c = d.c;
        if (c.op === 'advance') clock.advance(c.ms);
        else if (c.op === 'define') {
          config = { ...CONFIGS[c.config]!, maxAttempts: 1, deadLetter: 'dl' };
          q = { ...q, config };
        } else {
          await sides[0]!.h.reopen(() => clock.advance(c.closedMs));
          await sides[1]!.h.reopen();
        }
        await touchBoth();
        for (const side of sides) await registerMade(side, [q, dl]);
        continue;
      }
      if (d.op === 'dlDefined') {
        dlDefined = d.defined;
        continue;
      }
      const seen: unknown[] = [];
      for (const side of sides) {
        const store = side.h.store;
        let out: unknown;
        switch (d.op) {
          case 'base':
            out = d.c.op === 'get' ? shownLinked(side, await store.get(q, idFor(side, d.c.item))) : await run(side, q, d.c, step);
            break;
          case 'dlClaim':
            out = labeled(side, await store.claim(dl, { worker: d.worker }));
            break;
          case 'dlGet':
            out = shownLinked(side, await store.get(dl, idFor(side, d.item)));
            break;
          case 'dlCounts':
            out = await store.counts(dl);
            break;
          case 'dlError':
            out = await store.error(dl, idFor(side, d.item), '{"again":true}');
            break;
          case 'fail': {
            const posted = await store.post(q, { body: JSON.stringify({ kind: d.kind }), postedBy: 'producer' });
            register(side, posted);
            const claimed = await store.claim(q, { worker: 'w1' });
            out = [labeled(side, posted), labeled(side, claimed), claimed === null ? null : await store.error(q, claimed.id, `{"step":${step}}`, { final: true })];
            break;
          }
          case 'bulk': {
            const on = d.queue === 0 ? q : dl;
            const action: BulkAction = d.kind === 'redrive' ? { kind: 'redrive', queueNamed: (name) => (name === 'q' ? q : undefined) } : { kind: d.kind, statuses: d.statuses };
            out = await store.bulk(on, action, d.max);
            break;
          }
        }
        await registerMade(side, [q, dl]);
        seen.push(out);
      }
      if (!isDeepStrictEqual(seen[0], seen[1])) {
        throw new Error(`step ${step} ${JSON.stringify(d)}: the ${subject.name} store answered ${JSON.stringify(seen[0])}, the model ${JSON.stringify(seen[1])}`);
      }
    }
  } finally {
    for (const side of sides) await side.h.dispose();
  }
}
