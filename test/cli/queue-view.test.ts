import { expect } from 'chai';
import stringWidth from 'string-width';
import { flowLines, humanAge, humanRate, pushLines, queueDetailView, queueListTable, serverNowOf } from '../../src/cli/view/queues.js';
import type { QueueDetail, QueueEntry } from '../../src/operators/answers.js';
import { withoutColour } from '../support/colour.js';

const NOW = 1_700_000_000_000;

/** A queue whose server clock runs `skew` ms ahead of this machine's: its times are "later" by that much. */
function detailFrom(skew: number): QueueDetail {
  return {
    host: 'jobs.test',
    name: 'skewed',
    paused: false,
    counts: { pending: 2, claimed: 1, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 },
    // Measured by the server: its now minus the oldest item's postedAt.
    oldestPendingAgeMs: 90_000,
    rates: { posted: 0, claimed: 0, finished: 0, failed: 0 },
    oldest: [
      { id: 'aaaaaaaaaaaaaaaa', postedAt: NOW + skew - 90_000, attempts: 0 },
      { id: 'cccccccccccccccc', postedAt: NOW + skew - 30_000, attempts: 0 },
    ],
    leases: [{ id: 'bbbbbbbbbbbbbbbb', worker: 'w', until: NOW + skew + 30_000, attempts: 1 }],
  };
}

describe('svcq queue shows ages and lease ends against the server\'s clock (decisions §5.1)', () => {
  withoutColour();

  it('takes the server\'s now from the oldest pending item\'s age when this machine\'s clock is off by more than two seconds', () => {
    const skew = -5 * 60_000;
    expect(serverNowOf(detailFrom(skew), NOW)).to.equal(NOW + skew);
    const view = queueDetailView(detailFrom(skew), serverNowOf(detailFrom(skew), NOW));
    expect(view.split('\n').find((l) => l.includes('aaaaaaaaaaaaaaaa'))).to.include('1m 30s');
    expect(view.split('\n').find((l) => l.includes('cccccccccccccccc'))).to.include('30s');
    expect(view.split('\n').find((l) => l.includes('bbbbbbbbbbbbbbbb'))).to.match(/\b30s\b/);
  });

  it('keeps this machine\'s now when the clocks agree to within two seconds, or when nothing is pending to tell', () => {
    expect(serverNowOf(detailFrom(1500), NOW)).to.equal(NOW);
    expect(serverNowOf({ ...detailFrom(60_000), oldest: [], oldestPendingAgeMs: null }, NOW)).to.equal(NOW);
  });
});

function entry(host: string, name: string, figures: { pending: number; finished: number; ageMs: number }): QueueEntry {
  return {
    host,
    name,
    paused: false,
    counts: { pending: figures.pending, claimed: 3, processing: 12, finished: figures.finished, failed: 2345, timedout: 1, cancelled: 0 },
    oldestPendingAgeMs: figures.ageMs,
    rates: { posted: 12.5, claimed: 0.25, finished: 10.5, failed: 0.05 },
  };
}

/** What each column of `svcq queues` shows for a queue, whole. */
function wholeFigures(q: QueueEntry): Record<string, string> {
  const c = q.counts;
  return {
    host: q.host,
    queue: q.name,
    pending: String(c.pending),
    claimed: String(c.claimed),
    processing: String(c.processing),
    'in flight': String(c.claimed + c.processing),
    finished: String(c.finished),
    failed: String(c.failed),
    'oldest pending': humanAge(q.oldestPendingAgeMs),
    oldest: humanAge(q.oldestPendingAgeMs),
    'posted/s': humanRate(q.rates.posted),
    'claimed/s': humanRate(q.rates.claimed),
    'finished/s': humanRate(q.rates.finished),
    'failed/s': humanRate(q.rates.failed),
  };
}

/** The borderless table's header and rows as cells: columns are two or more spaces apart, and no cell holds two spaces. */
function cellsOf(text: string): { head: string[]; rows: string[][] } {
  const [head, ...rows] = text.split('\n').filter((l) => /\S {2,}\S/.test(l));
  const split = (line: string): string[] => line.trim().split(/ {2,}/);
  return { head: split(head!), rows: rows.map(split) };
}

describe('svcq queues fits the terminal: columns are left out or names cut, never a figure (decisions §5.1)', () => {
  withoutColour();

  const usual = [entry('jobs.example.com', 'thumbnails', { pending: 1_234_567, finished: 123_456, ageMs: 30 * 3_600_000 }), entry('jobs.example.com', 'emails', { pending: 12, finished: 0, ageMs: 59 * 60_000 + 59_000 })];
  const long = [...usual, entry('a-very-long-host-name-for-queues.internal.example.com', 'resize-uploaded-images-for-the-gallery-eu', { pending: 3, finished: 98_765_432, ageMs: 1500 })];

  for (const [queues, what] of [
    [usual, 'usual names'],
    [long, 'a long host and queue name'],
  ] as const) {
    for (const columns of [200, 150, 120, 100, 90, 80]) {
      it(`at ${columns} columns, with ${what}: no line is wider, and every figure shown is whole`, () => {
        const text = queueListTable({ queues: [...queues] }, columns);
        for (const line of text.split('\n')) expect(stringWidth(line), line).to.be.at.most(columns);
        if (text.includes('┌')) return;
        const { head, rows } = cellsOf(text);
        expect(rows).to.have.length(queues.length);
        rows.forEach((row, i) => {
          expect(row, text).to.have.length(head.length);
          const whole = wholeFigures(queues[i]!);
          head.forEach((column, n) => {
            if (column === 'host' || column === 'queue') return;
            expect(row[n], `${column} at ${columns} columns:\n${text}`).to.equal(whole[column]);
          });
        });
      });
    }
  }

  it('at 80 columns, with usual names, it keeps the names whole and shows pending, in flight, the oldest age and the rates of finished and failed items, and says what it left out', () => {
    const text = queueListTable({ queues: usual }, 80);
    const { head, rows } = cellsOf(text);
    expect(head).to.deep.equal(['host', 'queue', 'pending', 'in flight', 'oldest', 'finished/s', 'failed/s']);
    expect(rows[0]!.slice(0, 2)).to.deep.equal(['jobs.example.com', 'thumbnails']);
    expect(text).to.include('in flight: claimed + processing');
    expect(text).to.include('not shown (too narrow): finished, failed, posted/s, claimed/s; --json has them');
    expect(text).to.not.include('│');
  });

  it('long names are cut in their middle, the host first, to no fewer than 12 cells', () => {
    const text = queueListTable({ queues: long }, 80);
    const { rows } = cellsOf(text);
    const [host, queue] = rows[2]!;
    expect(host).to.match(/^a-ve.*….*\.com$/);
    expect(stringWidth(host!)).to.equal(12);
    expect(queue).to.match(/^resize.*….*-eu$/);
    expect(stringWidth(queue!)).to.be.at.least(12);
  });

  it('the bordered table, whole, where it fits, and into a pipe (no width known)', () => {
    for (const columns of [undefined, 400]) {
      const text = queueListTable({ queues: usual }, columns);
      expect(text).to.include('│ host ');
      for (const column of ['claimed/s', 'posted/s', 'oldest pending', 'processing']) expect(text).to.include(column);
      expect(text).to.not.include('not shown');
    }
  });
});

describe('svcq queues and svcq queue mark a paused queue (decisions §8.4)', () => {
  withoutColour();

  const paused = (q: QueueEntry): QueueEntry => ({ ...q, paused: true });
  const queues = [
    paused(entry('jobs.example.com', 'thumbnails', { pending: 1_234_567, finished: 123_456, ageMs: 30 * 3_600_000 })),
    entry('jobs.example.com', 'emails', { pending: 12, finished: 0, ageMs: 59 * 60_000 + 59_000 }),
    paused(entry('a-very-long-host-name-for-queues.internal.example.com', 'resize-uploaded-images-for-the-gallery-eu', { pending: 3, finished: 98_765_432, ageMs: 1500 })),
  ];

  for (const columns of [undefined, 200, 120, 100, 80, 60]) {
    it(`${columns === undefined ? 'into a pipe' : `at ${columns} columns`}: "(paused)" follows each paused queue's name, whole, and only theirs; names are cut no further for it (other columns give way first), and no line is wider`, () => {
      const text = queueListTable({ queues }, columns);
      if (columns !== undefined) for (const line of text.split('\n')) expect(stringWidth(line), line).to.be.at.most(columns);
      const lines = text.split('\n');
      const thumbnails = lines.find((l) => l.includes('thumbnails'))!;
      const emails = lines.find((l) => l.includes('emails'))!;
      const gallery = lines.find((l) => /resize.*-eu/.test(l))!;
      expect(thumbnails).to.include('thumbnails (paused)');
      expect(emails).to.not.include('(paused)');
      expect(gallery).to.match(/resize.*-eu \(paused\)/);
    });
  }

  it('svcq queue says the queue is paused, and how to resume it; a queue not paused says nothing of it', () => {
    const detail = { ...paused(entry('jobs.test', 'held', { pending: 2, finished: 0, ageMs: 1000 })), oldest: [], leases: [] };
    expect(queueDetailView(detail, NOW).split('\n')[1]).to.equal('paused: its claims find nothing until svcq resume jobs.test/held');
    expect(queueDetailView({ ...detail, paused: false }, NOW)).to.not.include('paused');
  });
});

describe('svcq queue shows the schedules, their next and last occurrences (decisions §8.3)', () => {
  withoutColour();

  it('lists each schedule with its next and last times and its last item; a queue without schedules shows no such section', () => {
    const plain = detailFrom(0);
    expect(queueDetailView(plain, NOW)).to.not.include('schedules');
    const view = queueDetailView({ ...plain, schedules: [{ name: 'nightly', next: NOW + 60_000, last: NOW - 60_000, lastId: 'dddddddddddddddd' }, { name: 'fresh', next: NOW + 1000, last: null, lastId: null }] }, NOW);
    expect(view).to.include('schedules (2)');
    const nightly = view.split('\n').find((l) => l.includes('nightly'))!;
    expect(nightly).to.include('dddddddddddddddd');
    expect(view.split('\n').find((l) => l.includes('fresh'))).to.match(/fresh.*│\s*-\s*│\s*-\s*│/);
  });
});

describe('svcq queue shows a queue\'s limits, the claims they held back and its dead letters (decisions §8.5, §8.6)', () => {
  withoutColour();
  const held = { paused: 0, maxActive: 0, groupMaxActive: 0, rateLimit: 0 };
  const plain = { maxActive: null, groupMaxActive: null, rateLimit: null, fairness: 'fifo', deadLetter: null } as const;

  it('one line each: the limits with the active count, the claims held back by reason, the groups waiting, the dead letters and how to send them back', () => {
    const q: QueueDetail = {
      ...detailFrom(0),
      limits: { maxActive: 4, groupMaxActive: 2, rateLimit: { max: 10, perSeconds: 60 }, fairness: 'groups', deadLetter: 'skewed-dead' },
      active: 1,
      held: { ...held, maxActive: 5, rateLimit: 2 },
      groupsWaiting: 3,
      deadLetters: 7,
    };
    expect(flowLines(q)).to.deep.equal([
      'limits: maxActive 4 (1 active), groupMaxActive 2, rateLimit 10 per 60 s, fairness groups',
      'claims held back (this node, since it started): 7 (maxActive 5, rateLimit 2)',
      'groups waiting: 3',
      'dead letters: 7 pending in skewed-dead (svcq redrive jobs.test/skewed-dead sends them back)',
    ]);
    expect(queueDetailView(q, NOW)).to.include('limits: maxActive 4 (1 active)');
  });

  it('nothing for a queue without limits or a dead-letter queue, or from a server before them; a dead-letter queue not defined says so', () => {
    expect(flowLines({ ...detailFrom(0), limits: plain, active: 0, held, groupsWaiting: null, deadLetters: null })).to.deep.equal([]);
    expect(flowLines(detailFrom(0))).to.deep.equal([]);
    expect(flowLines({ ...detailFrom(0), limits: { ...plain, deadLetter: 'gone' }, active: 0, held, groupsWaiting: null, deadLetters: null })).to.deep.equal(['dead letters: gone is not defined (failed items are not copied)']);
  });
});

describe('svcq queue shows a push queue\'s target and its health (decisions §9.1)', () => {
  withoutColour();
  const base = { url: 'http://127.0.0.1:9000/hook', inFlight: 2, concurrency: 10, consecutiveFailures: 0, failing: false, lastError: null, refused: false };

  it('the target, deliveries in flight, the last delivery, and a failing target with its last error', () => {
    const ok: QueueDetail = { ...detailFrom(0), push: { ...base, last: { outcome: 'delivered', code: 200, ms: 12, at: NOW } } };
    const lines = pushLines(ok);
    expect(lines[0]).to.equal('push to: http://127.0.0.1:9000/hook');
    expect(lines[1]).to.equal('target: ok, 2 of 10 deliveries in flight on this node');
    expect(lines[2]).to.match(/^last delivery: delivered \(200\) in 12 ms at /);
    expect(queueDetailView(ok, NOW)).to.include('push to: http://127.0.0.1:9000/hook');
    const failing: QueueDetail = { ...detailFrom(0), push: { ...base, inFlight: 0, last: { outcome: 'failed', code: null, ms: 30000, at: NOW }, consecutiveFailures: 3, failing: true, lastError: 'no answer within 30 s' } };
    expect(pushLines(failing).slice(1)).to.deep.include.members(['target: failing (3 in a row), 0 of 10 deliveries in flight on this node', 'last error: no answer within 30 s']);
    expect(pushLines(failing)[2]).to.match(/^last delivery: failed, no answer in 30000 ms/);
    const ahead: QueueDetail = { ...detailFrom(0), push: { ...base, claimedAhead: 10, last: null } };
    expect(pushLines(ahead)[1]).to.equal('target: no delivery yet, 2 of 10 deliveries in flight on this node, 10 claimed ahead');
  });

  it('a URL outside --push-allow says so; nothing for a queue that is not a push queue', () => {
    const refused: QueueDetail = { ...detailFrom(0), push: { ...base, inFlight: 0, last: null, failing: true, refused: true, lastError: '"http://x/" is not a URL this server may call' } };
    expect(pushLines(refused)[1]).to.equal('target: not allowed (outside --push-allow), 0 of 10 deliveries in flight on this node');
    expect(pushLines(detailFrom(0))).to.deep.equal([]);
    expect(pushLines({ ...detailFrom(0), push: null })).to.deep.equal([]);
  });
});
