import { expect } from 'chai';
import stringWidth from 'string-width';
import type { QueueDetail, QueueEntry } from '../../src/operators/answers.js';
import { advance, clockOffset, initialState, move, type TopState } from '../../src/cli/top/model.js';
import { screenLines, snapshotTable } from '../../src/cli/top/screen.js';
import { localTime } from '../../src/cli/view/format.js';
import { withoutColour } from '../support/colour.js';

const NOW = 1_800_000_000_000;
const VIEW = { url: 'http://127.0.0.1:8080', intervalMs: 1000 };

function entry(host: string, name: string, pending = 0): QueueEntry {
  return {
    host,
    name,
    paused: false,
    counts: { pending, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 },
    oldestPendingAgeMs: pending > 0 ? 1500 : null,
    rates: { posted: 0, claimed: 0, finished: 0, failed: 0 },
  };
}

/** The state after one refresh that found `queues`, the first selected, with `detail` for it. */
function stateWith(queues: QueueEntry[], detail: Partial<QueueDetail> = {}): TopState {
  const first = queues[0];
  const shown: QueueDetail | null = first ? { ...first, oldest: [], leases: [], ...detail } : null;
  return advance(initialState(), { at: NOW, list: { queues }, detail: shown, health: null, clockOffsetMs: 0 });
}

const many = (n: number): QueueEntry[] => Array.from({ length: n }, (_, i) => entry('jobs.test', `q-${String(i).padStart(3, '0')}`, i % 3));

describe('svcq top draws a screen that fits the terminal (decisions §5.1: operators see their queues live)', () => {
  withoutColour();

  for (const [columns, rows] of [
    [20, 3],
    [20, 5],
    [40, 10],
    [80, 12],
    [80, 24],
    [120, 40],
  ] as const) {
    it(`at ${columns}x${rows} it draws at most ${rows - 1} lines, so that a redraw never scrolls, and keeps the selected queue and the keys`, () => {
      const state = stateWith(many(200));
      const lines = screenLines(state, { columns, rows }, VIEW, NOW);
      expect(lines.length).to.be.at.most(rows - 1);
      expect(lines.some((l) => l.startsWith('>') && l.includes('q-000'))).to.equal(true);
      expect(lines.at(-1)).to.include('q quit');
    });
  }

  it('a short terminal gives its lines to the queues: at 40x10 more than one queue is shown', () => {
    const lines = screenLines(stateWith(many(200)), { columns: 40, rows: 10 }, VIEW, NOW);
    expect(lines.filter((l) => /q-\d{3}/.test(l)).length).to.be.greaterThan(3);
  });

  it('on a short terminal a failed refresh is still said, in place of the keys', () => {
    const state = { ...stateWith(many(5)), error: 'cannot reach http://127.0.0.1:8080 (connection refused)' };
    const lines = screenLines(state, { columns: 80, rows: 6 }, VIEW, NOW);
    expect(lines.length).to.be.at.most(5);
    expect(lines.at(-1)).to.include('cannot reach');
  });

  it('a failed refresh says from when the figures shown are, and that it keeps trying', () => {
    const state = { ...stateWith(many(5)), error: 'cannot reach http://127.0.0.1:8080 (connection refused)' };
    const shown = localTime(state.fetched!.at).slice(11, 19);
    const lines = screenLines(state, { columns: 160, rows: 30 }, { ...VIEW, intervalMs: 5000 }, NOW);
    expect(lines.at(-2)).to.equal(`! cannot reach http://127.0.0.1:8080 (connection refused); showing ${shown}; trying again every 5 s`);
    const never = screenLines({ ...initialState(), error: 'cannot reach http://127.0.0.1:8080 (connection refused)' }, { columns: 160, rows: 30 }, VIEW, NOW);
    expect(never.at(-2)).to.equal('! cannot reach http://127.0.0.1:8080 (connection refused); trying again every second');
  });

  it('the keys line says how often the view is refreshed: every second by default, every N s with --interval N', () => {
    const state = stateWith(many(3));
    expect(screenLines(state, { columns: 120, rows: 30 }, VIEW, NOW).at(-1)).to.include('refreshed every second');
    expect(screenLines(state, { columns: 120, rows: 30 }, { ...VIEW, intervalMs: 5000 }, NOW).at(-1)).to.include('refreshed every 5 s');
  });

  it('the sparkline spans the last minute, as its heading says: work done 45 s ago still shows, work done 61 s ago does not', () => {
    const queues = many(1);
    const spark = (series: number[], intervalMs: number): string => {
      const state = { ...stateWith(queues), throughput: new Map([[`${queues[0]!.host}/${queues[0]!.name}`, series]]) };
      const row = screenLines(state, { columns: 200, rows: 30 }, { ...VIEW, intervalMs }, NOW).find((l) => l.startsWith('>'))!;
      return row.slice(row.lastIndexOf(' ') + 1);
    };
    // One sample a second: 10 items done a second for the first 15 s of the minute, then none.
    const quietSince45s = [...Array<number>(15).fill(10), ...Array<number>(45).fill(0)];
    expect(spark(quietSince45s, 1000)).to.match(/[▂-█]/);
    expect(spark([10, ...Array<number>(60).fill(0)], 1000)).to.match(/^▁+$/);
    // One sample every 5 s: the 12 of the last minute, spread over the same width.
    const every5s = [10, 10, 10, ...Array<number>(9).fill(0)];
    expect(spark(every5s, 5000)).to.match(/^[▂-█]+▁+$/);
    expect(spark(every5s, 5000).length).to.equal(spark(quietSince45s, 1000).length);
  });

  it('ages and lease ends are the server\'s times, shown against the server\'s clock when this machine\'s is off by more than the snapshot\'s second (decisions §5.1)', () => {
    // The server's clock runs five minutes ahead: its postedAt and until are five minutes "later".
    const skew = 5 * 60_000;
    const queues = [entry('jobs.test', 'skewed', 1)];
    const detail = { oldest: [{ id: 'aaaaaaaaaaaaaaaa', postedAt: NOW + skew - 90_000, attempts: 0 }], leases: [{ id: 'bbbbbbbbbbbbbbbb', worker: 'w', until: NOW + skew + 30_000, attempts: 1 }] };
    const offset = clockOffset(Math.floor((NOW + skew) / 1000), NOW - 20, NOW + 20);
    expect(offset).to.be.within(skew - 1000, skew + 1000);
    const state = { ...stateWith(queues, detail) };
    state.fetched = { ...state.fetched!, clockOffsetMs: offset };
    const lines = screenLines(state, { columns: 120, rows: 30 }, VIEW, NOW);
    const oldest = lines.find((l) => l.includes('aaaaaaaaaaaaaaaa'))!;
    const lease = lines.find((l) => l.includes('bbbbbbbbbbbbbbbb'))!;
    // Not "-3m30s" old and "5m30s" left, as this machine's clock would have it.
    expect(oldest).to.match(/\b1m ?3\ds\b|\b1m ?2\ds\b|\b9\ds\b/);
    expect(lease).to.match(/\b[23]\ds\b/);
    // Uncorrected, a server a little behind would show an item posted "in the future": shown as just posted.
    state.fetched = { ...state.fetched!, clockOffsetMs: 0, detail: { ...state.fetched!.detail!, oldestPendingAgeMs: 0, oldest: [{ id: 'cccccccccccccccc', postedAt: NOW + 1500, attempts: 0 }] } };
    expect(screenLines(state, { columns: 120, rows: 30 }, VIEW, NOW).find((l) => l.includes('cccccccccccccccc'))).to.match(/ 0ms /);
    // Clocks within the snapshot's resolution are taken to agree: nothing moves by a second now and then.
    expect(clockOffset(Math.floor(NOW / 1000), NOW - 5, NOW + 5)).to.equal(0);
    expect(clockOffset(Math.floor((NOW - 1500) / 1000), NOW - 5, NOW + 5)).to.equal(0);
  });

  it('a screen redrawn between refreshes (a key, a resize) measures ages against the clock now, whether the server\'s time came from its snapshot or from the detail (decisions §5.1)', () => {
    const queues = [entry('jobs.test', 'slow', 1)];
    // Fetched at NOW, when the oldest item was 10 s old; drawn again 5 s later.
    const detail = { oldestPendingAgeMs: 10_000, oldest: [{ id: 'aaaaaaaaaaaaaaaa', postedAt: NOW - 10_000, attempts: 0 }] };
    const state = stateWith(queues, detail);
    const ageAt = (clockOffsetMs: number | null, now: number): string | undefined => {
      state.fetched = { ...state.fetched!, clockOffsetMs };
      return screenLines(state, { columns: 120, rows: 30 }, VIEW, now).find((l) => l.includes('aaaaaaaaaaaaaaaa'));
    };
    // The snapshot said the clocks agree; or it could not be read, and the detail tells the server's time.
    for (const offset of [0, null]) {
      expect(ageAt(offset, NOW), `offset ${offset}`).to.match(/ 10s /);
      expect(ageAt(offset, NOW + 5000), `offset ${offset}`).to.match(/ 15s /);
    }
  });

  it('a worker name is shown as text: its control characters (escape sequences, line breaks) cannot redraw or break the screen', () => {
    // Any queue user names the worker in its claim (up to 200 characters of its choosing).
    const worker = 'bad\u001b[2J\u001b[31mred\nnext\u009b2J';
    const queues = [entry('jobs.test', 'evil', 1)];
    const lease = { id: '72181742e04e844e', worker, until: NOW + 60_000, attempts: 1 };
    const lines = screenLines(stateWith(queues, { leases: [lease] }), { columns: 120, rows: 30 }, VIEW, NOW);
    // eslint-disable-next-line no-control-regex -- looking for control characters
    for (const line of lines) expect(line).not.to.match(/[\u0000-\u001f\u007f-\u009f]/);
    expect(lines.find((l) => l.includes(lease.id))).to.include('bad?[2J?[31mred?next?2J');
  });

  it('a wide terminal shows long host and queue names whole; a narrower one cuts them at 30 characters, in their middle', () => {
    const host = 'very-long-host-name-for-an-audit.subdomain.example-organisation.internal';
    const name = 'a-really-long-queue-name-that-goes-on-and-on-for-sixty-four-char';
    const state = stateWith([entry(host, name, 1), entry('jobs.test', 'short', 0)]);
    const wide = screenLines(state, { columns: 250, rows: 30 }, VIEW, NOW);
    const row = wide.find((l) => l.startsWith('>'))!;
    expect(row).to.include(`${host} ${name} `);
    for (const line of wide) expect(line.length, line).to.be.at.most(250);
    const narrow = screenLines(state, { columns: 120, rows: 30 }, VIEW, NOW).find((l) => l.startsWith('>'))!;
    expect(narrow).to.include(`${host.slice(0, 14)}…${host.slice(-15)} ${name.slice(0, 14)}…${name.slice(-15)} `);
  });

  it('queues named alike but for their end are told apart where their names are cut: in the rows and in the detail\'s title', () => {
    const host = 'a-very-long-host-name-for-queues.internal.example.com';
    const queues = ['eu', 'us', 'ap'].map((region) => entry(host, `resize-uploaded-images-for-the-gallery-${region}`, 1));
    for (const columns of [80, 100, 120]) {
      const lines = screenLines(stateWith(queues), { columns, rows: 30 }, VIEW, NOW);
      const rows = lines.filter((l) => l.includes(' 1 '));
      expect(rows, `${columns} columns`).to.have.length(3);
      rows.forEach((row, i) => expect(row, `${columns} columns`).to.match(new RegExp(`-${['eu', 'us', 'ap'][i]!} `)));
      // The hosts keep their end too: the domain's last labels say as much as its first.
      expect(rows[0], `${columns} columns`).to.match(/^>a-ver\S*…\S*\.com /);
      // The detail's title, cut in its middle to fit, its counts on the line below where they do not fit beside it.
      const title = lines.find((l) => l.startsWith('a-ver'))!;
      expect(title, `${columns} columns`).to.include('gallery-eu');
      expect(stringWidth(title), `${columns} columns`).to.be.at.most(columns);
    }
  });

  it('on a terminal narrower than a whole row (80 columns) every figure and the latest of the sparkline still show: names shrink and the sparkline narrows, nothing runs off the edge', () => {
    // Ink cuts a line at the terminal's edge: what lies past it is lost, the sparkline's latest samples first.
    const recent = [...Array<number>(55).fill(0), 4, 8, 12, 16, 20];
    const withSpark = (queues: QueueEntry[]): TopState => ({ ...stateWith(queues), throughput: new Map(queues.map((q) => [`${q.host}/${q.name}`, recent])) });
    const longHost = 'a-very-long-host-name-for-queues.internal.example.com';
    const longName = 'queue-with-a-rather-long-descriptive-name-01';
    // Where the sparkline fits, even narrowed, it shows; where only the figures fit, they do.
    for (const [queues, columns, spark] of [
      [[entry('jobs.example.com', 'emails', 5)], 80, true],
      [[entry('jobs.example.com', 'emails', 5)], 100, true],
      [[entry(longHost, longName, 5)], 80, false],
      [[entry(longHost, longName, 5)], 100, false],
      [[entry(longHost, longName, 5)], 120, true],
    ] as const) {
      const lines = screenLines(withSpark([...queues]), { columns, rows: 30 }, VIEW, NOW);
      const table = lines.filter((l) => l.includes('PENDING') || l.includes(' 5 '));
      expect(table).to.have.length(2);
      for (const line of table) expect(stringWidth(line), `${columns} columns: ${line}`).to.be.at.most(columns);
      const [header, row] = table as [string, string];
      // pending, in flight, finished/s, failed/s, oldest; then the sparkline, its latest samples the highest.
      expect(row, `${columns} columns`).to.match(spark ? / +5 +0 +0 +0 +1\.5s ▁*[▂-█]+$/ : / +5 +0 +0 +0 +1\.5s$/);
      expect(header, `${columns} columns`).to.match(spark ? / OLDEST DONE/ : / OLDEST$/);
    }
    // Short names on a wide terminal: the whole sparkline, as before.
    const wide = screenLines(withSpark([entry('jobs.example.com', 'emails', 5)]), { columns: 120, rows: 30 }, VIEW, NOW);
    expect(wide.find((l) => l.startsWith('>'))!.split(' ').pop()).to.have.length(30);
    expect(wide.find((l) => l.includes('PENDING'))).to.include('DONE/S, LAST MINUTE');
  });

  it('the detail gives its rows to whichever list has more to show: leases when nothing is pending, pending items when nothing is leased', () => {
    const queues = [entry('jobs.test', 'busy', 0)];
    const leases = Array.from({ length: 100 }, (_, i) => ({ id: `lease${String(i).padStart(11, '0')}`, worker: 'w', until: NOW + 60_000, attempts: 1 }));
    const leased = screenLines(stateWith(queues, { leases }), { columns: 120, rows: 80 }, VIEW, NOW);
    expect(leased).to.have.length(79);
    // Every line is used: 6 above the detail (title, health, a blank, the header, the queue, a blank),
    // 5 of the detail's own (its title, each list's title, the leases' header, the other's "none"), 2 below.
    expect(leased.filter((l) => l.includes('lease0'))).to.have.length(79 - 6 - 5 - 2);
    const oldest = Array.from({ length: 20 }, (_, i) => ({ id: `item${String(i).padStart(12, '0')}`, postedAt: NOW - 60_000 + i, attempts: 0 }));
    const waiting = screenLines(stateWith([{ ...queues[0]!, counts: { ...queues[0]!.counts, pending: 20 } }], { oldest }), { columns: 120, rows: 30 }, VIEW, NOW);
    expect(waiting.filter((l) => l.includes('item0'))).to.have.length(29 - 6 - 5 - 2);
  });
  it('columns line up in terminal cells: worker names in CJK characters or with emoji (two cells each) are padded and cut by width', () => {
    const queues = [entry('jobs.test', 'wide', 0)];
    const workers = ['plain-worker', '東京の作業者-01', '🚀 rocket', '名前がとても長いワーカーの名前です-東京-大阪-名古屋'];
    const leases = workers.map((worker, i) => ({ id: `lease${String(i).padStart(11, '0')}`, worker, until: NOW + 60_000, attempts: 1 }));
    const lines = screenLines(stateWith(queues, { leases }), { columns: 120, rows: 30 }, VIEW, NOW).filter((l) => l.includes('lease0'));
    expect(lines).to.have.length(4);
    // The ENDS IN column starts at the same cell on every row: the worker cell is 24 cells wide.
    const endsAt = lines.map((l) => stringWidth(l.slice(0, l.indexOf('1m 0s'))));
    expect(new Set(endsAt).size, lines.join('\n')).to.equal(1);
    expect(new Set(lines.map((l) => stringWidth(l))).size).to.equal(1);
    // The long name is cut to 23 cells and an ellipsis, between whole characters.
    expect(lines[3]).to.include('名前がとても長いワーカ…');
  });

  it('a selected queue deleted meanwhile leaves the selection where it stood (on the queue now in its place), not on the first', () => {
    const queues = many(10);
    let state = stateWith(queues);
    state = move(state, 6);
    expect(state.selected).to.equal('jobs.test/q-006');
    const without = queues.filter((q) => q.name !== 'q-006');
    state = advance(state, { at: NOW + 1000, list: { queues: without }, detail: null, health: null, clockOffsetMs: 0 });
    expect(state.selected).to.equal('jobs.test/q-007');
    // At the end of the list, the last queue.
    state = move(state, Infinity);
    state = advance(state, { at: NOW + 2000, list: { queues: without.slice(0, -1) }, detail: null, health: null, clockOffsetMs: 0 });
    expect(state.selected).to.equal('jobs.test/q-008');
  });

  it('with stdin not a terminal (no keys read), the footer says Ctrl-C quits instead of listing keys that do nothing', () => {
    const state = stateWith(many(3));
    const last = screenLines(state, { columns: 120, rows: 30 }, { ...VIEW, keys: false }, NOW).at(-1)!;
    expect(last).to.include('Ctrl-C quits');
    expect(last).not.to.include('q quit');
    expect(screenLines(state, { columns: 40, rows: 6 }, { ...VIEW, keys: false }, NOW).at(-1)).to.include('Ctrl-C quits');
  });

  it('at 80 columns every figure shows whole: the health line drops its bars and cuts the server\'s name, big counts widen their column, the detail\'s counts go on the next line, a lease long ended says so at length', () => {
    const big: QueueEntry = {
      host: 'jobs.example.com',
      name: 'thumbnails',
      paused: false,
      counts: { pending: 1_234_567_890, claimed: 3, processing: 12, finished: 123_456, failed: 2345, timedout: 12, cancelled: 7 },
      oldestPendingAgeMs: 30 * 3_600_000,
      rates: { posted: 12.5, claimed: 11.25, finished: 10.5, failed: 0.05 },
    };
    const health = {
      ts: NOW / 1000,
      uptime: 1000,
      hostname: 'worker-node-eu-west-1a.internal.example.com',
      load: [1.25, 2.5, 3.75],
      cpu: null,
      memory: { total: 8e9, used: 4e9, available: 4e9, free: 4e9 },
      disk: { path: '/', total: 1e11, used: 7.5e10, free: 2.5e10 },
      diskIo: null,
      netIo: null,
    };
    const lease = { id: 'bbbbbbbbbbbbbbbb', worker: 'w', until: NOW - 23 * 3_600_000 - 59 * 60_000, attempts: 1 };
    const state = stateWith([big, entry('jobs.example.com', 'emails', 12)], { leases: [lease] });
    state.fetched = { ...state.fetched!, health };
    state.cpuBusy = null;
    const lines = screenLines(state, { columns: 80, rows: 30 }, VIEW, NOW);
    for (const line of lines) expect(stringWidth(line), line).to.be.at.most(80);
    const text = lines.join('\n');
    for (const figure of ['load 1.25 2.50 3.75', 'mem  50 %', 'disk  75 %', ' 1234567890 ', 'finished 123456', 'failed 2345', 'timedout 12', 'cancelled 7', 'posted/s 13', 'claimed/s 11', 'ended 23h 59m ago']) {
      expect(text, figure).to.include(figure);
    }
    expect(lines[1]).to.match(/^worker-.*….*\.com {2}load /);
    // Figures line up under their headings.
    const header = lines.find((l) => l.includes('PENDING'))!;
    const row = lines.find((l) => l.startsWith('>'))!;
    expect(row.indexOf('1234567890') + '1234567890'.length).to.equal(header.indexOf('PENDING') + 'PENDING'.length);
  });
});

describe('svcq top marks a paused queue (decisions §8.4)', () => {
  withoutColour();

  const queues = [{ ...entry('jobs.test', 'held-queue', 4), paused: true }, entry('jobs.test', 'running', 2), { ...entry('a-rather-long-host-name.example.com', 'resize-uploaded-images-for-the-gallery-eu', 1), paused: true }];

  for (const columns of [160, 100, 80]) {
    it(`at ${columns} columns "(paused)" follows each paused queue's name, whole (the name is cut for it where the row is short of room), in its row and in the selected queue's title, and no line is wider`, () => {
      const lines = screenLines(stateWith(queues, { paused: true }), { columns, rows: 30 }, VIEW, NOW);
      for (const line of lines) expect(stringWidth(line), line).to.be.at.most(columns);
      expect(lines.find((l) => l.startsWith('>'))).to.match(columns >= 100 ? /held-queue \(paused\)/ : /h\S*…\S*e \(paused\)/);
      expect(lines.find((l) => l.includes('running'))).to.not.include('(paused)');
      expect(lines.find((l) => l.includes(' a-r'))).to.match(/ r\S*…\S*u \(paused\)/);
      expect(lines.find((l) => l.startsWith('jobs.test/held-queue'))).to.match(/^jobs\.test\/held-queue \(paused\)/);
    });
  }

  it('off a terminal, the snapshot table marks it too', () => {
    const text = snapshotTable(queues, null);
    expect(text.split('\n').find((l) => l.includes('held-queue'))).to.include('held-queue (paused)');
    expect(text.split('\n').find((l) => l.includes('running'))).to.not.include('(paused)');
  });
});

describe('svcq top shows flow control (decisions §8.5, §8.6)', () => {
  withoutColour();
  const held = { paused: 0, maxActive: 3, groupMaxActive: 0, rateLimit: 1 };
  const limited: QueueEntry = {
    ...entry('jobs.test', 'limited', 2),
    counts: { pending: 2, claimed: 10, processing: 5, finished: 0, failed: 0, timedout: 0, cancelled: 0 },
    limits: { maxActive: 15, groupMaxActive: null, rateLimit: { max: 10, perSeconds: 60 }, fairness: 'fifo', deadLetter: 'limited-dead' },
    active: 15,
    held,
    groupsWaiting: null,
    deadLetters: 4,
  };
  const plain = entry('jobs.test', 'plain', 1);

  it('in flight against maxActive in the row, and limits, held claims and dead letters under the selected queue\'s title; no line wider than the terminal', () => {
    for (const columns of [160, 100, 80]) {
      const lines = screenLines(stateWith([limited, plain]), { columns, rows: 30 }, VIEW, NOW);
      for (const line of lines) expect(stringWidth(line), line).to.be.at.most(columns);
      expect(lines.find((l) => l.startsWith('>'))).to.include('15/15');
      if (columns >= 80) expect(lines.find((l) => l.includes('active 15/15'))).to.include('held 4').and.include('dead letters 4 in limited-dead');
    }
  });

  it('off a terminal, the snapshot table has held and dead-letter columns where a queue has limits or a dead-letter queue, and none otherwise', () => {
    const text = snapshotTable([limited, plain], null);
    const lines = text.split('\n');
    expect(lines.find((l) => l.includes('in flight'))).to.match(/held.*dead letters/);
    expect(lines.find((l) => l.includes('limited'))).to.match(/15\/15.*\b4\b.*\b4\b/);
    expect(lines.find((l) => l.includes('plain'))).to.match(/\b0\b.*-/);
    expect(snapshotTable([plain], null)).to.not.include('dead letters');
  });

  it('a push queue\'s target health: under the selected queue\'s title, and a column of the snapshot table (decisions §9.1)', () => {
    const push = { url: 'http://127.0.0.1:9000/hook', inFlight: 3, concurrency: 10, last: { outcome: 'failed' as const, code: 500, ms: 4, at: NOW }, consecutiveFailures: 2, failing: true, lastError: 'the target answered 500', refused: false };
    const pushed: QueueEntry = { ...entry('jobs.test', 'pushed', 3), push };
    const lines = screenLines(stateWith([pushed, plain]), { columns: 120, rows: 30 }, VIEW, NOW);
    expect(lines.find((l) => l.includes('push failing'))).to.include('failing (2 in a row) 3/10 in flight');
    const text = snapshotTable([pushed, plain], null);
    expect(text.split('\n').find((l) => l.includes('in flight'))).to.include('push target');
    expect(text.split('\n').find((l) => l.includes('pushed'))).to.include('failing (2 in a row)');
    expect(snapshotTable([plain], null)).to.not.include('push target');
  });
});
