import fc from 'fast-check';
import { embedded } from './support/stores.js';
import { command, CONFIGS, deadLetterCommand, deadLetterSequence, DL_RUNS, MAX_COMMANDS, RUNS, sequence } from './support/model-sequences.js';

// The embedded store against the reference model (test/store/support/model-sequences.ts says how);
// PostgreSQL's runs are in model-based-postgres.test.ts, so that the two take a worker each.

describe('the embedded store against the reference model (model-based, fast-check)', function () {
  this.timeout(60_000 + RUNS * 500);

  it(`answers every caller as the model does over ${RUNS} random sequences of posts and batch posts (with delays, times, priorities and groups), claims (one or up to max) with criteria, submissions, cancels, fetches, counts, operator overviews, pauses and resumes, errors with the worker's wish and releases, schedule ticks, clock advances, definition changes (backoff, limits and fairness among them) and restarts, with what held each claim back (decisions §3, §3.8, §5.1, §6, §8.1, §8.2, §8.3, §8.4, §8.5)`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: CONFIGS.length - 1 }), fc.array(command, { maxLength: MAX_COMMANDS, size: 'max' }), (initial, commands) => sequence({ name: 'embedded', factory: embedded }, initial, commands)),
      { numRuns: RUNS },
    );
  });
});

describe('dead letters and bulk actions against the reference model (model-based, fast-check, decisions §8.6)', function () {
  this.timeout(60_000 + DL_RUNS * 500);

  it(`the embedded store answers as the model does over ${DL_RUNS} random sequences on a queue with a deadLetter queue (failures copied, that queue defined or not), redrives, retries and cancels in batches, restarts among them (decisions §6, §8.6)`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: CONFIGS.length - 1 }), fc.array(deadLetterCommand, { maxLength: MAX_COMMANDS, size: 'max' }), (initial, commands) => deadLetterSequence({ name: 'embedded', factory: embedded }, initial, commands)),
      { numRuns: DL_RUNS },
    );
  });

  it('answers as the model does a bulk retry of two items whose timeouts passed together, the later posted one first in claim order by its priority (seed -313295338: the embedded store timed them out again at its next tick, by posting order, so their dead-letter copies came in the other order; decisions §6, §8.6)', async () => {
    const commands = [
      { op: 'fail', kind: 'a' },
      { op: 'base', c: { op: 'post', kind: 'a', n: null, key: null, options: { at: 1699999999000, priority: 1 } } },
      { op: 'base', c: { op: 'advance', ms: 10022 } },
      { op: 'base', c: { op: 'advance', ms: 14978 } },
      { op: 'bulk', queue: 0, kind: 'retry', statuses: ['failed', 'timedout', 'cancelled'], max: 2 },
      { op: 'dlGet', item: 11 },
    ];
    await deadLetterSequence({ name: 'embedded', factory: embedded }, 4, commands as Parameters<typeof deadLetterSequence>[2]);
  });
});
