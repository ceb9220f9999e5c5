/**
 * VACUUM of the two small tables that queues by groups rewrite at every turn, run by the node
 * itself as they churn rather than left to autovacuum alone.
 *
 * A claim by groups fairness moves its group to the back of the order: a new row version in
 * `svcq_groups`, and in its order index a new entry at the back while the old one, dead, stays at
 * the front, exactly where the next claim's index walk begins. A post writes a row of
 * `svcq_group_wakes` that the next claim's fold deletes. Until a VACUUM removes them, every claim
 * walks past the dead entries of every turn taken since the last one (the fold's scan also visits
 * the heap of each dead wake, being a bitmap scan). Autovacuum visits a database at most once per
 * `autovacuum_naptime` (a minute by default), and its few workers may be busy with the items
 * table meanwhile: at 500 claims a second, a claim read 116 pages of the groups index for six
 * rows, and the fold 93 pages to find none (1,000,000 items over 10,000 groups, 13,000 turns after
 * the backlog's posts, never autovacuumed; docs/postgresql-flow.md).
 *
 * So each node counts the changes it commits to items of queues by groups and, past
 * {@link VacuumOptions.after} of them, runs `VACUUM (SKIP_LOCKED)` on both tables on a
 * connection of its pool, outside any transaction (cut, as every read, when the database does not
 * answer within the store's answer timeout): a VACUUM takes no lock that a claim, a post or
 * a fold waits for, and a node finding another node's VACUUM under way skips its own. One at a
 * time per node, and after each one the node waits {@link VacuumOptions.share} times as long as it
 * took (at least {@link VacuumOptions.minGapMs}), so that on a database with many groups, where a
 * VACUUM takes longer, it still takes a small share of the time. A role that does not own the
 * tables gets a warning from PostgreSQL and nothing is done: autovacuum alone cleans them then.
 *
 * Each table is vacuumed by a statement of its own and waits out its own last VACUUM's share, so
 * that one long VACUUM of one table does not hold back the other's. The long one comes after a
 * backlog: the first claim folds the wakes of every post before it, and the VACUUM that removes
 * them took 304 ms after two million posts (1,000,000 items over 10,000 groups). Waited out on both
 * tables, it left the groups' order unvacuumed for the next 18 s, and every claim walked past the
 * dead entries of the turns taken since: 81–91 pages instead of 3–10 (docs/postgresql-flow.md).
 */
export interface VacuumOptions {
  /** Changes to items of queues by groups after which a VACUUM is due (default 2,000: a claim and its result count two). */
  after?: number;
  /** At least this long between the end of one VACUUM and the start of the next, in ms (default 2,000). */
  minGapMs?: number;
  /** ...and at least this many times as long as the last one took (default 40). */
  share?: number;
}

/** The two tables, each vacuumed by a statement of its own. */
const TABLES = ['svcq_groups', 'svcq_group_wakes'] as const;

export class GroupsVacuum {
  private changes = 0;
  private running: Promise<void> | undefined;
  /** Per table, the `now()` before which no VACUUM of it starts. */
  private readonly notBefore = new Map<string, number>();
  private failing = false;
  private runs = 0;
  private readonly after: number;
  private readonly minGapMs: number;
  private readonly share: number;

  constructor(
    /** Runs a statement on a connection of the pool, cut when it does not answer in time; undefined once the store is closing. */
    private readonly run: (sql: string) => Promise<unknown> | undefined,
    private readonly warn: (line: string) => void,
    options: VacuumOptions = {},
    /** A monotonic clock in ms (performance.now(); a test gives its own). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.after = options.after ?? 2000;
    this.minGapMs = options.minGapMs ?? 2000;
    this.share = options.share ?? 40;
  }

  /** Notes `n` changes committed to items of queues by groups; starts a VACUUM when one is due. */
  changed(n: number): void {
    this.changes += n;
    if (this.changes < this.after || this.running) return;
    const now = this.now();
    const due = TABLES.filter((t) => now >= (this.notBefore.get(t) ?? 0));
    if (due.length === 0) return;
    this.changes = 0;
    this.running = this.vacuumed(due).finally(() => {
      this.running = undefined;
    });
  }

  /** VACUUMs `tables` one after the other; each then waits out its share. */
  private async vacuumed(tables: readonly string[]): Promise<void> {
    for (const table of tables) {
      const started = this.now();
      const running = this.run(`VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) ${table}`);
      if (!running) return;
      let failed = false;
      try {
        await running;
      } catch (err) {
        failed = true;
        if (!this.failing) this.warn(`vacuuming the groups tables failed (it is tried again after more claims; autovacuum still runs): ${(err as Error).message}`);
        this.failing = true;
      } finally {
        const now = this.now();
        this.notBefore.set(table, now + Math.max(this.minGapMs, (now - started) * this.share));
      }
      if (failed) return;
    }
    this.runs++;
    if (this.failing) this.warn('vacuuming the groups tables succeeds again');
    this.failing = false;
  }

  /** Rounds of VACUUM this node finished so far (each of the tables that were due). */
  get finished(): number {
    return this.runs;
  }

  /** Resolves once no VACUUM of this node runs. */
  async settled(): Promise<void> {
    await this.running;
  }
}
