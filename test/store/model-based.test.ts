import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { resolveQueue, type QueueConfig } from '../../src/engine/config.js';
import type { Criteria } from '../../src/engine/criteria.js';
import type { QueueDefinition } from '../../src/definitions/schemas.js';
import type { QueueRef, StatusRecord } from '../../src/store/store.js';
import { embedded, FakeClock, model, type StoreUnderTest } from './support/stores.js';

/**
 * The embedded store against the reference model: random sequences of operations run on both
 * side by side, on one fake clock, and everything a caller would see is compared (ids, which are
 * random, are compared by the order the items were posted in). fast-check shrinks a difference to
 * a minimal sequence. `SVCQ_FC_RUNS=N` runs N sequences instead of the default.
 */

const RUNS = Number(process.env.SVCQ_FC_RUNS ?? 300);
const MAX_COMMANDS = 40;
const UNKNOWN_ID = '0000000000000000';

/** Rules small enough that leases, retry delays, timeouts and retention all come due within a sequence. */
const DEFINITIONS: QueueDefinition[] = [
  { leaseSeconds: 10, maxAttempts: 2 },
  { leaseSeconds: 5, maxAttempts: 1, retainSeconds: 30 },
  { leaseSeconds: 10, maxAttempts: 3, retryDelaySeconds: 7, timeoutSeconds: 60, retainSeconds: 20 },
  { leaseSeconds: 20, maxAttempts: 2, retainFrom: 'fetched', retainSeconds: 15 },
  { leaseSeconds: 3, maxAttempts: 4, retryDelaySeconds: 2, timeoutSeconds: 25, retainFrom: 'fetched', retainSeconds: 5 },
];
const CONFIGS: QueueConfig[] = DEFINITIONS.map((def) => resolveQueue(def));

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
  | { op: 'post'; kind: string; n: number | null; key: string | null }
  | { op: 'claim'; criteria: number; worker: string }
  | { op: 'progress' | 'result' | 'error' | 'cancel' | 'get'; item: number }
  | { op: 'counts' }
  | { op: 'advance'; ms: number }
  | { op: 'define'; config: number }
  | { op: 'restart'; closedMs: number };

const durations = fc.oneof(fc.constantFrom(1, 999, 1000, 2000, 3000, 5000, 7000, 10_000, 15_000, 20_000, 25_000, 30_000, 60_000), fc.integer({ min: 1, max: 70_000 }));
const item = fc.nat({ max: 12 });

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant('post' as const), kind: fc.constantFrom('a', 'b', 'c'), n: fc.option(fc.nat({ max: 3 })), key: fc.option(fc.constantFrom('k1', 'k2', 'k3'), { freq: 3 }) }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('claim' as const), criteria: fc.nat({ max: CRITERIA.length - 1 }), worker: fc.constantFrom('w1', 'w2') }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constantFrom('progress' as const, 'result' as const, 'error' as const, 'cancel' as const, 'get' as const), item }) },
  { weight: 1, arbitrary: fc.constant({ op: 'counts' as const }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: durations }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('define' as const), config: fc.nat({ max: CONFIGS.length - 1 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('restart' as const), closedMs: fc.oneof(fc.constant(0), durations) }) },
);

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
    case 'post': {
      const body = JSON.stringify(c.n === null ? { kind: c.kind } : { kind: c.kind, n: c.n });
      const out = await store.post(q, { body, postedBy: 'producer', idempotencyKey: c.key ?? undefined });
      if (out.created) side.ids.push(out.id);
      return { ...out, id: label(side, out.id) };
    }
    case 'claim': {
      const claimed = await store.claim(q, { worker: c.worker, criteria: CRITERIA[c.criteria] });
      return claimed === null ? null : { ...claimed, id: label(side, claimed.id) };
    }
    case 'progress':
    case 'result':
    case 'error':
      return store[c.op](q, idFor(side, c.item), `{"${c.op}":${step}}`);
    case 'cancel':
      return store.cancel(q, idFor(side, c.item));
    case 'get':
      return shown(side, await store.get(q, idFor(side, c.item)));
    case 'counts':
      return store.counts(q);
    default:
      return undefined;
  }
}

/**
 * A request with nothing to do but apply what is due, on both sides. The embedded store also
 * applies deadlines by timers, at moments the fake clock does not control; after every change of
 * time, rules or process the test lets a request apply what is due under the rules in force, so
 * that the later timers find nothing left and both stores answer the same whatever they do.
 */
async function touch(sides: Side[], q: QueueRef): Promise<void> {
  for (const side of sides) await side.h.store.get(q, UNKNOWN_ID);
}

async function sequence(initial: number, commands: Command[]): Promise<void> {
  const clock = new FakeClock();
  let config = CONFIGS[initial]!;
  const configFor = (): QueueConfig => config;
  let q: QueueRef = { key: 'model.example.com/q', host: 'model.example.com', name: 'q', config };
  const sides: Side[] = [
    { name: 'embedded', h: await embedded({ configFor, clock }), ids: [] },
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
        // Time passes while the embedded store is down; the model does nothing between requests anyway.
        await sides[0]!.h.reopen(() => clock.advance(c.closedMs));
        await sides[1]!.h.reopen();
        await touch(sides, q);
        continue;
      }
      const seen = [];
      for (const side of sides) seen.push(await run(side, q, c, step));
      if (!isDeepStrictEqual(seen[0], seen[1])) {
        throw new Error(`step ${step} ${JSON.stringify(c)}: the embedded store answered ${JSON.stringify(seen[0])}, the model ${JSON.stringify(seen[1])}`);
      }
    }
  } finally {
    for (const side of sides) await side.h.dispose();
  }
}

describe('the embedded store against the reference model (model-based, fast-check)', function () {
  this.timeout(60_000 + RUNS * 500);

  it(`answers every caller as the model does over ${RUNS} random sequences of posts, claims with criteria, submissions, cancels, fetches, counts, clock advances, definition changes and restarts (decisions §3, §6)`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: CONFIGS.length - 1 }), fc.array(command, { maxLength: MAX_COMMANDS, size: 'max' }), sequence),
      { numRuns: RUNS },
    );
  });
});
