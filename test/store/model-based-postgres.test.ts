import fc from 'fast-check';
import { droppedAll, postgresUnderTest } from './support/stores.js';
import { command, deadLetterCommand, deadLetterSequence, DL_PG_RUNS, fromEach, fromEachRuns, MAX_COMMANDS, PG_RUNS, PURGED_AT_ONCE, PURGED_RUNS, sequence, turnCommand, turns, type TurnCommand } from './support/model-sequences.js';

// The PostgreSQL store against the reference model (test/store/support/model-sequences.ts says
// how), when SVCQ_TEST_PG_URL names a server that answers; otherwise shown as skipped, with why.
const pg = await postgresUnderTest();

/**
 * Bounds of a test's sequences on PostgreSQL: one sequence fails after 60 s (a call that never
 * answers), and the search for a shorter failing sequence stops 20 s before the test's timeout, so
 * that a failure is reported with its sequence and seed rather than as the test's timeout.
 */
const bounds = (test: Mocha.Context): { endBy: number; sequenceMs: number } => ({ endBy: Date.now() + test.timeout() - 20_000, sequenceMs: 60_000 });

describe('the PostgreSQL store against the reference model (model-based, fast-check)', function () {
  // Each sequence makes a database of its own: about half a second alone, and seen past 4 s a
  // sequence while the rest of the suite loaded the machine. The time allowed is not a measure.
  this.timeout(60_000 + PG_RUNS * 7500);
  // Each sequence's database is dropped while the next sequences run.
  after(() => droppedAll());

  if (!('factory' in pg)) {
    before(function () {
      console.log(`    skipped: ${pg.whyNot}`);
      this.skip();
    });
  }

  it(`answers every caller as the model does over ${fromEachRuns(PG_RUNS)} random sequences, as many from each definition, of posts and batch posts (with delays, times, priorities and groups), claims (one or up to max) with criteria, submissions, cancels, fetches, counts, operator overviews, pauses and resumes, errors with the worker's wish and releases, schedule ticks, clock advances, definition changes (backoff, limits and fairness among them) and restarts, with what held each claim back (decisions §3, §3.8, §5.1, §6, §6.1, §8.1, §8.2, §8.3, §8.4, §8.5)`, async function () {
    if (!('factory' in pg)) return;
    const factory = pg.factory;
    await fromEach(PG_RUNS, fc.array(command, { maxLength: MAX_COMMANDS, size: 'max' }), (initial, commands) => sequence({ name: 'postgres', factory }, initial, commands), undefined, bounds(this));
  });

  it(`answers calls made in one turn on two queues (one transaction) as the model does running them in the order the fold does, over ${fromEachRuns(PG_RUNS)} random sequences of such turns, as many from each definition (pauses and resumes, errors with a wish and releases among the calls), clock advances and definition changes, limits and fairness among them (decisions §3, §3.8, §6, §6.1, §8.1, §8.2, §8.4, §8.5)`, async function () {
    if (!('factory' in pg)) return;
    const factory = pg.factory;
    await fromEach(PG_RUNS, fc.array(turnCommand, { maxLength: 25, size: 'max' }), (initial, commands) => turns({ name: 'postgres', factory }, initial, commands), undefined, bounds(this));
  });

  it('answers as the model does a turn in which claims by groups fairness take more than their one statement while a progress folded after them reads an item, right after the queue got its groups (seed -1205634112: the rest was taken after writing what the statement took, under the progress that had read the row before; decisions §6, §8.5)', async () => {
    if (!('factory' in pg)) return;
    const post = { queue: 0, c: { op: 'post', kind: 'a', n: null, key: null, options: null } };
    const commands = [
      { op: 'turn', calls: [post] },
      { op: 'define', config: 16 },
      { op: 'turn', calls: [post] },
      { op: 'turn', calls: [post, { queue: 0, c: { op: 'progress', item: 0 } }] },
      { op: 'turn', calls: [{ queue: 0, c: { op: 'claim', criteria: 0, worker: 'w1' } }, { queue: 0, c: { op: 'claimMany', criteria: 0, worker: 'w1', max: 1 } }, { queue: 0, c: { op: 'progress', item: 5 } }] },
    ] as unknown as TurnCommand[];
    await turns({ name: 'postgres', factory: pg.factory }, 12, commands);
  });

  it('answers as the model does a turn in which posts to a queue by groups fairness come before a claim (seed -2083981606: the claim went out before the posts were answered, so their wakes were not written, and it served a group served before over the posts\' group, never served; decisions §6, §8.5)', async () => {
    if (!('factory' in pg)) return;
    const post = (options: unknown) => ({ queue: 0, c: { op: 'post', kind: 'a', n: null, key: null, options } });
    const commands = [
      { op: 'turn', calls: [post({ group: 'g1' }), { queue: 0, c: { op: 'claim', criteria: 0, worker: 'w1' } }] },
      { op: 'advance', ms: 10_000 },
      { op: 'turn', calls: [{ queue: 0, c: { op: 'postMany', items: [{ kind: 'a', key: null }], options: null } }, { queue: 0, c: { op: 'claimMany', criteria: 0, worker: 'w1', max: 1 } }, post(null)] },
    ] as unknown as TurnCommand[];
    await turns({ name: 'postgres', factory: pg.factory }, 16, commands);
  });

  it('answers as the model does a turn of two claims and a claim with criteria under a rate limit of 2 (seed -336405678: the claim with criteria, run after the plain claims in their transaction, read the rate slots their leases would fill as the table still had them, and leased a third item in the window; decisions §6, §8.5)', async () => {
    if (!('factory' in pg)) return;
    const claim = (criteria: number) => ({ queue: 0, c: { op: 'claim', criteria, worker: 'w1' } });
    const commands = [
      { op: 'turn', calls: [{ queue: 0, c: { op: 'postMany', items: [{ kind: 'a', key: null }, { kind: 'a', key: null }], options: null } }, { queue: 0, c: { op: 'progress', item: 0 } }] },
      { op: 'define', config: 15 },
      { op: 'turn', calls: [{ queue: 0, c: { op: 'post', kind: 'b', n: null, key: null, options: null } }] },
      { op: 'turn', calls: [claim(0), claim(3), claim(0)] },
    ] as unknown as TurnCommand[];
    await turns({ name: 'postgres', factory: pg.factory }, 9, commands);
  });

  it(`answers calls made in one turn as the model does on queues that purge an item the moment it ends (retainSeconds 0: a post with its key, a cancel or a submission later in the same transaction meets it gone), over ${fromEachRuns(PURGED_RUNS, PURGED_AT_ONCE)} random sequences, as many from each such definition (decisions §3.5, §5, §6.1)`, async function () {
    if (!('factory' in pg)) return;
    const factory = pg.factory;
    await fromEach(PURGED_RUNS, fc.array(turnCommand, { maxLength: 25, size: 'max' }), (initial, commands) => turns({ name: 'postgres', factory }, initial, commands), PURGED_AT_ONCE, bounds(this));
  });
});

describe('dead letters and bulk actions against the reference model on PostgreSQL (model-based, fast-check, decisions §8.6)', function () {
  // Generous: alone the property takes about a minute, beside the rest of npm test on two cores over four.
  this.timeout(60_000 + fromEachRuns(DL_PG_RUNS) * 20_000);
  after(() => droppedAll());

  it(`PostgreSQL answers as the model does over ${fromEachRuns(DL_PG_RUNS)} such sequences, as many from each definition (decisions §6.1, §8.6)`, async function () {
    if (!('factory' in pg)) return this.skip();
    const factory = pg.factory;
    await fromEach(DL_PG_RUNS, fc.array(deadLetterCommand, { maxLength: MAX_COMMANDS, size: 'max' }), (initial, commands) => deadLetterSequence({ name: 'postgres', factory }, initial, commands), undefined, bounds(this));
  });
});
