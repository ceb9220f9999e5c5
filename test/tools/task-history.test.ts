import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import type { EventOutbox, OutboxEntry } from '../../src/store/store.js';
import { HistoryUnavailable, TaskEventLog } from '../../src/tools/task-events.js';
import { cleanupTemp, tempDir } from '../support/server.js';

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
  beforeEach(() => {
    dir = tempDir('svcq-history-');
  });
  afterEach(() => cleanupTemp(dir));

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
