import { expect } from 'chai';
import { parseDefinition } from '../../src/definitions/schemas.js';
import { MISSED_AFTER_MS, nextOccurrence, occurrencesBetween, planSchedule, resolveSchedule, scheduleView, type ScheduleDefinition, type ScheduleState } from '../../src/engine/schedules.js';

const iso = (s: string): number => Date.parse(s);
const at = (t: number): string => new Date(t).toISOString();
const spec = (def: ScheduleDefinition, name = 's') => resolveSchedule(name, def);

/** The occurrences after `from`, `n` of them. */
function runs(def: ScheduleDefinition, from: string, n: number): string[] {
  const s = spec(def);
  const out: string[] = [];
  let t = iso(from);
  for (let i = 0; i < n; i++) {
    t = nextOccurrence(s, t)!;
    out.push(at(t));
  }
  return out;
}

describe('schedules: when occurrences fall (decisions §8.3)', () => {
  it('every: each multiple of the interval since the Unix epoch, strictly after the time given', () => {
    const s = spec({ every: 60 });
    expect(nextOccurrence(s, iso('2026-01-01T00:00:30Z'))).to.equal(iso('2026-01-01T00:01:00Z'));
    expect(nextOccurrence(s, iso('2026-01-01T00:01:00Z'))).to.equal(iso('2026-01-01T00:02:00Z'));
  });

  it('cron: 5 fields with month and day names, read in the zone given', () => {
    expect(runs({ cron: '0 9 * JAN-DEC MON-FRI', timezone: 'Europe/Berlin' }, '2026-01-02T12:00:00Z', 2)).to.deep.equal(['2026-01-05T08:00:00.000Z', '2026-01-06T08:00:00.000Z']);
    expect(runs({ cron: '*/20 * * * *' }, '2026-01-01T00:05:00Z', 3)).to.deep.equal(['2026-01-01T00:20:00.000Z', '2026-01-01T00:40:00.000Z', '2026-01-01T01:00:00.000Z']);
  });

  it('a local time that a daylight-saving change skips does not occur that day (Europe/Berlin, 29 March 2026)', () => {
    // 02:30 does not exist on 29 March: the runs are 02:30 CET on the 28th and 02:30 CEST on the 30th.
    expect(runs({ cron: '30 2 * * *', timezone: 'Europe/Berlin' }, '2026-03-27T12:00:00Z', 2)).to.deep.equal(['2026-03-28T01:30:00.000Z', '2026-03-30T00:30:00.000Z']);
  });

  it('a local time that a daylight-saving change repeats occurs once (Europe/Berlin, 25 October 2026)', () => {
    // 02:30 happens twice on 25 October (CEST, then CET): once here, the first time.
    expect(runs({ cron: '30 2 * * *', timezone: 'Europe/Berlin' }, '2026-10-24T12:00:00Z', 2)).to.deep.equal(['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z']);
    // A wildcard hour too: 02:00-02:45 once each, then 03:00 CET.
    const times = runs({ cron: '*/15 2-3 * * *', timezone: 'Europe/Berlin' }, '2026-10-24T23:59:00Z', 8);
    expect(times).to.deep.equal(['2026-10-25T00:00:00.000Z', '2026-10-25T00:15:00.000Z', '2026-10-25T00:30:00.000Z', '2026-10-25T00:45:00.000Z', '2026-10-25T02:00:00.000Z', '2026-10-25T02:15:00.000Z', '2026-10-25T02:30:00.000Z', '2026-10-25T02:45:00.000Z']);
    const back = occurrencesBetween(spec({ cron: '*/15 2-3 * * *', timezone: 'Europe/Berlin' }), iso('2026-10-24T23:59:00Z'), iso('2026-10-25T02:50:00Z'), 100);
    expect(back.at.map(at)).to.deep.equal(times);
  });

  it('occurrencesBetween keeps the latest ones when there are more than asked for', () => {
    const r = occurrencesBetween(spec({ every: 1 }), 0, 1000_000, 100);
    expect(r.more).to.equal(true);
    expect(r.at).to.have.length(100);
    expect(r.at[0]).to.equal(901_000);
    expect(r.at[99]).to.equal(1000_000);
  });
});

describe('schedules: what a tick posts (decisions §8.3), on a fake clock', () => {
  const T = iso('2026-05-01T00:00:00Z');
  const started = (s: ReturnType<typeof spec>, passedAt: number): ScheduleState => ({ hash: s.hash, passedAt, lastAt: null, lastId: null });

  it('a new schedule starts at its next occurrence: the first tick posts nothing and records now', () => {
    const s = spec({ every: 10 });
    const plan = planSchedule(s, undefined, T + 5000, false);
    expect(plan.post).to.deep.equal([]);
    expect(plan.state).to.deep.include({ hash: s.hash, passedAt: T + 5000 });
    expect(planSchedule(s, plan.state!, T + 9999, false)).to.deep.equal({ state: null, post: [] });
    expect(planSchedule(s, plan.state!, T + 10_000, false).post).to.deep.equal([T + 10_000]);
  });

  it('a changed schedule starts afresh (its hash differs), keeping its last item', () => {
    const s = spec({ every: 10 });
    const old: ScheduleState = { hash: 'other', passedAt: T - 100_000, lastAt: T - 100_000, lastId: 'aaaaaaaaaaaaaaaa' };
    const plan = planSchedule(s, old, T, false);
    expect(plan.post).to.deep.equal([]);
    expect(plan.state).to.deep.equal({ hash: s.hash, passedAt: T, lastAt: T - 100_000, lastId: 'aaaaaaaaaaaaaaaa' });
    // Seen by a node whose clock is behind what has passed: what has passed stays passed.
    expect(planSchedule(s, { ...old, passedAt: T + 5000 }, T, false).state).to.deep.include({ hash: s.hash, passedAt: T + 5000 });
  });

  it('occurrences within a few seconds are posted each, whatever missed says', () => {
    for (const missed of ['skip', 'once', 'all'] as const) {
      const s = spec({ every: 1, missed });
      expect(planSchedule(s, started(s, T), T + 3000, false).post).to.deep.equal([T + 1000, T + 2000, T + 3000]);
    }
  });

  it(`missed: an occurrence more than ${MISSED_AFTER_MS} ms old is missed: skip posts none of them, once the latest, all each of the latest 100`, () => {
    const now = T + 3_600_000 + 500;
    const skip = spec({ every: 60, missed: 'skip' });
    const once = spec({ every: 60, missed: 'once' });
    const all = spec({ every: 60, missed: 'all' });
    expect(planSchedule(skip, started(skip, T), now, false)).to.deep.equal({ state: { hash: skip.hash, passedAt: T + 3_600_000, lastAt: null, lastId: null }, post: [T + 3_600_000] });
    expect(planSchedule(once, started(once, T), now, false).post).to.deep.equal([T + 3_540_000, T + 3_600_000]);
    const each = planSchedule(all, started(all, T), now, false).post;
    expect(each).to.have.length(60);
    expect(each[0]).to.equal(T + 60_000);
    const many = spec({ every: 1, missed: 'all' });
    expect(planSchedule(many, started(many, T), T + 1_000_000, false).post).to.have.length(100);
    // Missed with nothing on time: skip posts nothing, yet the occurrences pass.
    expect(planSchedule(skip, started(skip, T), T + 3_630_000, false)).to.deep.equal({ state: { hash: skip.hash, passedAt: T + 3_600_000, lastAt: null, lastId: null }, post: [] });
  });

  it('overlap skip: nothing is posted while the previous item is not terminal, but the occurrence passes; at most one item per tick', () => {
    const s = spec({ every: 1, overlap: 'skip', missed: 'all' });
    const state: ScheduleState = { hash: s.hash, passedAt: T, lastAt: T, lastId: 'aaaaaaaaaaaaaaaa' };
    expect(planSchedule(s, state, T + 3000, true)).to.deep.equal({ state: { ...state, passedAt: T + 3000 }, post: [] });
    expect(planSchedule(s, state, T + 3000, false).post).to.deep.equal([T + 3000]);
    const allow = spec({ every: 1, overlap: 'allow' });
    expect(planSchedule(allow, { ...state, hash: allow.hash }, T + 2000, true).post).to.deep.equal([T + 1000, T + 2000]);
  });

  it('the view: next after what has passed, last and its item', () => {
    const s = spec({ every: 10 });
    expect(scheduleView(s, undefined, T + 1)).to.deep.equal({ name: 's', next: T + 10_000, last: null, lastId: null });
    expect(scheduleView(s, { hash: s.hash, passedAt: T + 10_000, lastAt: T + 10_000, lastId: 'aaaaaaaaaaaaaaaa' }, T + 10_100)).to.deep.equal({ name: 's', next: T + 20_000, last: T + 10_000, lastId: 'aaaaaaaaaaaaaaaa' });
  });
});

describe('schedules in a queue definition (decisions §8.3)', () => {
  const at = { path: 'h/svc-queues/q.json', kind: 'queue', host: 'h', name: 'q' } as unknown as Parameters<typeof parseDefinition>[0];
  const problems = (def: unknown): string[] => {
    const parsed = parseDefinition(at, JSON.stringify(def));
    return 'problems' in parsed ? parsed.problems : [];
  };

  it('accepts a cron schedule and an every schedule with every field', () => {
    expect(problems({ schedules: { nightly: { cron: '0 3 * * MON-FRI', timezone: 'Europe/Berlin', item: { a: 1 }, priority: 5, group: 'g', missed: 'all', overlap: 'skip' }, tick: { every: 30 } } })).to.deep.equal([]);
  });

  it('refuses, naming the field: both or neither of cron and every, an unknown zone, a bad expression, bad names and values, more than 100', () => {
    expect(problems({ schedules: { a: { cron: '* * * * *', every: 5 } } })).to.deep.equal(['schedules.a must have exactly one of cron and every']);
    expect(problems({ schedules: { a: {} } })).to.deep.equal(['schedules.a must have exactly one of cron and every']);
    expect(problems({ schedules: { a: { cron: '0 3 * * *', timezone: 'Mars/Olympus' } } })[0]).to.match(/^schedules\.a\.timezone /);
    expect(problems({ schedules: { a: { cron: '0 3 * *' } } })[0]).to.match(/^schedules\.a\.cron must have 5 fields/);
    expect(problems({ schedules: { a: { cron: '61 3 * * *' } } })[0]).to.match(/^schedules\.a\.cron /);
    expect(problems({ schedules: { a: { cron: '@daily' } } })[0]).to.match(/^schedules\.a\.cron /);
    expect(problems({ schedules: { a: { every: 0 } } })[0]).to.match(/every must be an integer number of seconds/);
    expect(problems({ schedules: { a: { every: 5, missed: 'never' } } })[0]).to.match(/missed must be "skip", "once" or "all"/);
    expect(problems({ schedules: { a: { every: 5, colour: 'red' } } })[0]).to.match(/unknown field "colour"/);
    expect(problems({ schedules: { 'Bad Name': { every: 5 } } })[0]).to.match(/^schedules/);
    const many = Object.fromEntries(Array.from({ length: 101 }, (_, n) => [`s${n}`, { every: 5 }]));
    expect(problems({ schedules: many })[0]).to.match(/^schedules/);
  });

  it("checks each schedule's item against the queue's schema", () => {
    const schema = { type: 'object', required: ['src'], properties: { src: { type: 'string' } } };
    expect(problems({ schema, schedules: { a: { every: 5, item: { src: 'x' } } } })).to.deep.equal([]);
    expect(problems({ schema, schedules: { a: { every: 5 } } })[0]).to.match(/^schedules\.a\.item does not match the queue's schema/);
  });
});
