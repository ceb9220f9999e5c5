import { expect } from 'chai';
import { GroupsVacuum } from '../../src/store/postgres/pg-vacuum.js';

/**
 * When a PostgreSQL node vacuums the groups tables (pg-vacuum.ts), on a clock of its own: the
 * statements it sends are held until the test ends them, with the time they took.
 */
function harness(options = { after: 100, minGapMs: 1000, share: 10 }) {
  let now = 0;
  const sent: Array<{ sql: string; end: (tookMs: number, err?: Error) => void }> = [];
  const warnings: string[] = [];
  const vacuum = new GroupsVacuum(
    (sql) =>
      new Promise<void>((resolve, reject) => {
        sent.push({
          sql,
          end: (tookMs, err) => {
            now += tookMs;
            if (err) reject(err);
            else resolve();
          },
        });
      }),
    (line) => warnings.push(line),
    options,
    () => now,
  );
  /** Ends the statement sent last, after `tookMs`, and lets the node go on to its next. */
  const end = async (tookMs: number, err?: Error): Promise<void> => {
    sent.at(-1)!.end(tookMs, err);
    for (let i = 0; i < 5; i++) await Promise.resolve();
  };
  return { vacuum, sent, warnings, end, advance: (ms: number) => (now += ms), tables: () => sent.map((s) => /\S+$/.exec(s.sql)![0]) };
}

describe('the groups tables vacuumed by each PostgreSQL node (pg-vacuum.ts)', () => {
  it('vacuums only after `after` changes, both tables one after the other, never two rounds at once (pg-vacuum: one at a time per node)', async () => {
    const h = harness();
    h.vacuum.changed(99);
    expect(h.sent).to.have.length(0);
    h.vacuum.changed(1);
    expect(h.tables()).to.deep.equal(['svcq_groups']);
    expect(h.sent[0]!.sql).to.equal('VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) svcq_groups');
    // Changes while one runs start nothing more.
    h.vacuum.changed(500);
    await h.end(5);
    expect(h.tables()).to.deep.equal(['svcq_groups', 'svcq_group_wakes']);
    h.vacuum.changed(500);
    await h.end(5);
    await h.vacuum.settled();
    expect(h.vacuum.finished).to.equal(1);
    expect(h.sent).to.have.length(2);
  });

  it('a table waits out the share of its own last VACUUM: a long one of the wakes does not hold back the groups (pg-vacuum: each table its own share)', async () => {
    const h = harness();
    h.vacuum.changed(100);
    await h.end(20); // svcq_groups: 20 ms, so 1,000 ms (minGapMs) from its end (at 20 ms)
    await h.end(300); // svcq_group_wakes: 300 ms, so 3,000 ms (share × 300) from its end (at 320 ms)
    await h.vacuum.settled();
    h.advance(699);
    h.vacuum.changed(100);
    expect(h.sent, 'before the groups table has waited out its gap').to.have.length(2);
    h.advance(1);
    h.vacuum.changed(1);
    expect(h.tables().slice(2), 'the groups table alone: the wakes still wait').to.deep.equal(['svcq_groups']);
    await h.end(50); // 500 ms (share × 50) is below minGapMs: 1,000 ms
    await h.vacuum.settled();
    expect(h.vacuum.finished).to.equal(2);
    // The changes counted towards the next one start from nothing again.
    h.advance(3000);
    h.vacuum.changed(99);
    expect(h.sent).to.have.length(3);
    h.vacuum.changed(1);
    expect(h.tables().slice(3)).to.deep.equal(['svcq_groups']);
    await h.end(10);
    expect(h.tables().slice(4)).to.deep.equal(['svcq_group_wakes']);
    await h.end(10);
    await h.vacuum.settled();
    expect(h.vacuum.finished).to.equal(3);
  });

  it('a VACUUM that fails warns once, is tried again after more changes and its gap, and its success is said (pg-vacuum: autovacuum still runs)', async () => {
    const h = harness();
    h.vacuum.changed(100);
    await h.end(10, new Error('permission denied'));
    await h.vacuum.settled();
    expect(h.sent, 'the round stops at the failure').to.have.length(1);
    expect(h.warnings).to.deep.equal(['vacuuming the groups tables failed (it is tried again after more claims; autovacuum still runs): permission denied']);
    h.advance(1000);
    h.vacuum.changed(100);
    await h.end(10, new Error('permission denied'));
    await h.vacuum.settled();
    expect(h.warnings, 'said once while it keeps failing').to.have.length(1);
    h.advance(1000);
    h.vacuum.changed(100);
    await h.end(10);
    await h.end(10);
    await h.vacuum.settled();
    expect(h.warnings.at(-1)).to.equal('vacuuming the groups tables succeeds again');
    expect(h.vacuum.finished).to.equal(1);
  });
});
