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
 */
export interface VacuumOptions {
  /** Changes to items of queues by groups after which a VACUUM is due (default 2,000: a claim and its result count two). */
  after?: number;
  /** At least this long between the end of one VACUUM and the start of the next, in ms (default 2,000). */
  minGapMs?: number;
  /** ...and at least this many times as long as the last one took (default 40). */
  share?: number;
}

const STATEMENT = 'VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) svcq_groups, svcq_group_wakes';

export class GroupsVacuum {
  private changes = 0;
  private running: Promise<void> | undefined;
  /** performance.now() before which no VACUUM starts. */
  private notBefore = 0;
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
  ) {
    this.after = options.after ?? 2000;
    this.minGapMs = options.minGapMs ?? 2000;
    this.share = options.share ?? 40;
  }

  /** Notes `n` changes committed to items of queues by groups; starts a VACUUM when one is due. */
  changed(n: number): void {
    this.changes += n;
    if (this.changes < this.after || this.running || performance.now() < this.notBefore) return;
    const running = this.run(STATEMENT);
    if (!running) return;
    this.changes = 0;
    const started = performance.now();
    this.running = running
      .then(
        () => {
          this.runs++;
          if (this.failing) this.warn('vacuuming the groups tables succeeds again');
          this.failing = false;
        },
        (err: Error) => {
          if (!this.failing) this.warn(`vacuuming the groups tables failed (it is tried again after more claims; autovacuum still runs): ${err.message}`);
          this.failing = true;
        },
      )
      .finally(() => {
        const now = performance.now();
        this.notBefore = now + Math.max(this.minGapMs, (now - started) * this.share);
        this.running = undefined;
      });
  }

  /** VACUUMs this node finished so far. */
  get finished(): number {
    return this.runs;
  }

  /** Resolves once no VACUUM of this node runs. */
  async settled(): Promise<void> {
    await this.running;
  }
}
