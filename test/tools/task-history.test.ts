import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { EventOutbox, OutboxEntry } from '../../src/store/store.js';
import { HistoryUnavailable, TaskEventLog } from '../../src/tools/task-events.js';
import { tempDirEachTest } from '../support/server.js';

/** An outbox holding fixed entries, as a store hands them over (decisions §5). */
function outboxOf(entries: OutboxEntry[]): EventOutbox & { delivered: number } {
  return {
    delivered: 0,
    readEvents(afterSeq, limit) {
      return entries.filter((e) => e.seq > afterSeq).slice(0, limit);
    },
    eventsDelivered(seq) {
      this.delivered = seq;
    },
    onEvents() {},
  };
}

describe('the task history when a write fails (decisions §5, §6)', function () {
  this.timeout(20_000);
  let dir: string;
  tempDirEachTest((made) => (dir = made), 'svcq-history-');

  it('writes events spanning two days once each when the second day-file fails and is tried again; a flush meanwhile is refused, not held', async () => {
    const first = Date.parse('2026-01-01T23:59:59Z');
    const second = Date.parse('2026-01-02T00:00:01Z');
    const outbox = outboxOf([
      { seq: 1, ts: first, lines: ['{"n":1}\n'] },
      { seq: 2, ts: second, lines: ['{"n":2}\n'] },
    ]);
    // The second day's file cannot be opened: a folder stands in its place.
    const blocker = path.join(dir, 'tasks-2026-01-02.log');
    mkdirSync(blocker);
    const log = new TaskEventLog(dir);
    await log.start(outbox);
    try {
      const refused = await log.flush().then(
        () => null,
        (err: Error) => err,
      );
      expect(refused, 'a flush while the history cannot be written').to.be.instanceOf(HistoryUnavailable);
      expect(refused!.message).to.match(/task history could not be brought up to date/);
      rmSync(blocker, { recursive: true });
      await log.flush();
      expect(readFileSync(path.join(dir, 'tasks-2026-01-01.log'), 'utf8')).to.equal('{"n":1}\n');
      expect(readFileSync(path.join(dir, 'tasks-2026-01-02.log'), 'utf8'), 'the first day\'s event was written again into the second day').to.equal('{"n":2}\n');
      expect(outbox.delivered).to.equal(2);
    } finally {
      await log.close();
    }
  });

  it('a new history records where it starts before it writes: lines a crash left before the first position was recorded are cut, and written once (decisions §5)', async () => {
    const first = new TaskEventLog(dir);
    await first.start(outboxOf([]));
    await first.close();
    // A crash right after the first write, before its position: the line is there, the position still says 0 bytes.
    const now = Date.now();
    const file = path.join(dir, `tasks-${new Date(now).toISOString().slice(0, 10)}.log`);
    writeFileSync(file, '{"n":1}\n');
    const again = new TaskEventLog(dir);
    await again.start(outboxOf([{ seq: 1, ts: now, lines: ['{"n":1}\n'] }]));
    try {
      await again.flush();
      expect(readFileSync(file, 'utf8')).to.equal('{"n":1}\n');
    } finally {
      await again.close();
    }
  });
});

describe('the task history of a root written by a build that kept its position in the store\'s journal (decisions §5: every event once)', function () {
  this.timeout(20_000);
  let home: string;
  tempDirEachTest((made) => (home = made), 'svcq-history-');

  it('lines written after the journal\'s last mark ["m", seq, file, size] are cut off and written once from the journal, not twice', async () => {
    const event = (n: number): string => `{"ts":${Date.parse('2026-01-01T12:00:00Z') + n},"host":"jobs.test","queue":"work","id":"000000000000000${n}","event":"posted","attempts":0,"status":"pending"}\n`;
    // Journal records of such a build (no group ends): three events, and a mark after the first. The
    // history had written the second too when the process was killed, before its next mark.
    const storeDir = path.join(home, 'store');
    const tasksDir = path.join(home, 'tasks');
    mkdirSync(storeDir);
    mkdirSync(tasksDir);
    const journal = [1, 2, 3].map((n) => `["e",${n},[${event(n).trimEnd()}]]\n`);
    journal.splice(1, 0, `["m",1,"tasks-2026-01-01.log",${event(1).length}]\n`);
    writeFileSync(path.join(storeDir, 'journal-0.jsonl'), journal.join(''));
    writeFileSync(path.join(tasksDir, 'tasks-2026-01-01.log'), event(1) + event(2));

    const store = new EmbeddedStore({ dir: storeDir, hooks: { stage: () => Promise.reject(new Error('no payloads here')) }, configFor: () => undefined, warn: () => undefined });
    await store.open();
    const log = new TaskEventLog(tasksDir);
    await log.start(store);
    try {
      await log.flush();
      expect(readFileSync(path.join(tasksDir, 'tasks-2026-01-01.log'), 'utf8')).to.equal(event(1) + event(2) + event(3));
    } finally {
      await log.close();
      await store.close();
    }
  });
});

describe('the task history with --history-days (decisions §5: the history outlives retention, and an operator may cap it)', function () {
  this.timeout(20_000);
  let dir: string;
  tempDirEachTest((made) => (dir = made), 'svcq-history-');

  const day = (d: string): number => Date.parse(`${d}T12:00:00Z`);
  const names = (): string[] => readdirSync(dir).filter((n) => n.startsWith('tasks-')).sort();

  it('removes the day-files of days more than N days past, at start and when asked again, and keeps the rest', async () => {
    const outbox = outboxOf([
      { seq: 1, ts: day('2026-01-01'), lines: ['{"n":1}\n'] },
      { seq: 2, ts: day('2026-01-05'), lines: ['{"n":2}\n'] },
      { seq: 3, ts: day('2026-01-08'), lines: ['{"n":3}\n'] },
      { seq: 4, ts: day('2026-01-09'), lines: ['{"n":4}\n'] },
    ]);
    const writer = new TaskEventLog(dir);
    await writer.start(outbox);
    await writer.flush();
    await writer.close();
    expect(names()).to.deep.equal(['tasks-2026-01-01.log', 'tasks-2026-01-05.log', 'tasks-2026-01-08.log', 'tasks-2026-01-09.log']);

    // Today is far past every one of them: all but the day-file the history writes to go (at start, in the background).
    const log = new TaskEventLog(dir, { keepDays: 3 });
    await log.start(outboxOf([]));
    try {
      const deadline = Date.now() + 5000;
      while (names().length > 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(names()).to.deep.equal(['tasks-2026-01-09.log']);
      expect(readFileSync(path.join(dir, 'tasks-2026-01-09.log'), 'utf8')).to.equal('{"n":4}\n');
    } finally {
      await log.close();
    }
  });

  it('counts days by UTC date: with N = 3 on 2026-01-09, 2026-01-06 and later stay, 2026-01-05 and earlier go', async () => {
    for (const d of ['2026-01-04', '2026-01-05', '2026-01-06', '2026-01-07']) writeFileSync(path.join(dir, `tasks-${d}.log`), '{}\n');
    const outbox = outboxOf([{ seq: 1, ts: day('2026-01-09'), lines: ['{"n":9}\n'] }]);
    const log = new TaskEventLog(dir, { keepDays: 3 });
    await log.start(outbox);
    try {
      await log.flush();
      expect(await log.prune(Date.parse('2026-01-09T23:59:59Z'))).to.deep.equal(['tasks-2026-01-04.log', 'tasks-2026-01-05.log']);
      expect(names()).to.deep.equal(['tasks-2026-01-06.log', 'tasks-2026-01-07.log', 'tasks-2026-01-09.log']);
      // 0 keeps every one.
      expect(await new TaskEventLog(dir).prune(Date.parse('2027-01-01T00:00:00Z'))).to.deep.equal([]);
    } finally {
      await log.close();
    }
  });
});
