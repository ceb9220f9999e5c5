// Claims on the PostgreSQL store: plain claims of one queue folded into one locking read of the
// pending index in claim order, and claims with criteria that read pages without locks and lock
// only the matching rows.
import { matches } from '../../engine/criteria.js';
import * as rules from '../../engine/rules.js';
import { claimedOf, type Claimed, type ClaimInput, type QueueRef } from '../store.js';
import { PREFILTER_SQL, prefilterOf } from './pg-criteria.js';
import { applyDue, COLUMNS, named, type ItemRow, type Tx } from './pg-tx.js';

/** Pending rows a claim with criteria reads (without locking) per step of its walk. */
const CLAIM_PAGE = 500;

/**
 * The pause (decisions §8.4), checked in the claim's own statement, whose first parameter is the
 * queue's key. Read there, the pause is the database's, rather than a set of paused queues kept in
 * each node's memory and refreshed by notifications: a claim whose statement starts after a pause
 * committed (on any node) finds nothing, with nothing to keep fresh on each node and no window in
 * which a node that missed a notification still leases. It costs a claim next to nothing: the
 * subquery names no column of the items, so PostgreSQL runs it once per statement (an InitPlan:
 * one probe of svcq_queues' primary key, a table of one row per queue) as a one-time filter ahead
 * of the walk of the pending index, which it skips whole when the queue is paused; and a statement
 * claims for every plain claim of its queue in the transaction. (Measured on a backlog of 100,000:
 * 111.8 µs a claim statement with it, 111.2 µs without, round trip included.)
 */
export const NOT_PAUSED = 'NOT EXISTS (SELECT 1 FROM svcq_queues WHERE key = $1 AND paused)';

export interface PlainClaim {
  input: ClaimInput;
  max: number;
}

/**
 * Claims without criteria, in the order they were made, each taking the oldest claimable items
 * left (`ORDER BY (-priority), ord LIMIT … FOR UPDATE SKIP LOCKED` for all of them at once: rows another
 * transaction holds are skipped, never waited for). Each row is checked again with
 * rules.claimable once locked: another node may have changed it since this statement began.
 */
export async function claimPlain(tx: Tx, ref: QueueRef, calls: readonly PlainClaim[], group = tx.groups, before?: Promise<unknown>): Promise<Claimed[][]> {
  // Groups started after this one (`group`, the number of the claims' own) may post before a
  // later page of it is read: their items come after these claims in the fold's order, so these
  // claims pass them by.
  const postedLater = (id: string): boolean => (tx.postedBy.get(`${ref.key}\n${id}`) ?? -1) > group;
  const out: Claimed[][] = calls.map(() => []);
  let at = 0;
  const settled = (): void => {
    while (at < calls.length && (out[at]!.length >= calls[at]!.max || calls[at]!.input.signal?.aborted)) at++;
  };
  settled();
  // Items an error made pending again must be in the table for the claim: the writes go out
  // ahead of its first statement, in the same go (the group's statement is sent at once, in
  // its place among the transaction's).
  const ahead = tx.requeued(ref.key) ? tx.flush() : undefined;
  ahead?.catch(() => undefined);
  let after = -1;
  let afterRank = -1000;
  while (at < calls.length) {
    let need = 0;
    for (let i = at; i < calls.length; i++) if (!calls[i]!.input.signal?.aborted) need += calls[i]!.max - out[i]!.length;
    // Rows this transaction changed already still show pending: asked for on top, so that one
    // page is enough unless a deadline fell on some row.
    const limit = need + tx.stagedPending(ref.key);
    const reading = tx.query<ItemRow>(
      named('svcq_claim', `SELECT ${COLUMNS} FROM svcq_items
        WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND ((-priority), ord) > ($2::integer, $3) AND ${NOT_PAUSED}
        ORDER BY (-priority), ord LIMIT $4 FOR UPDATE SKIP LOCKED`, 'ordered'),
      [ref.key, afterRank, after, limit],
    );
    if (ahead) {
      // Its failure, if any, is the cause (the claim behind it then fails too).
      reading.catch(() => undefined);
      await ahead;
    }
    // The groups folded before apply their answers first (see AppliedInOrder in postgres-store.ts).
    if (before) {
      reading.catch(() => undefined);
      await before;
      before = undefined;
    }
    const rows = (await reading).rows;
    if (rows.length === 0) break;
    after = rows[rows.length - 1]!.ord;
    afterRank = -rows[rows.length - 1]!.priority;
    for (const row of rows) {
      settled();
      if (at >= calls.length) break;
      if (postedLater(row.id)) continue;
      // Its own earlier change in this transaction counts (an item it claimed or finished already).
      const loaded = tx.current(ref, row);
      if (!loaded) continue;
      const r = applyDue(tx, ref, loaded);
      if (!r || !rules.claimable(r, tx.now)) continue;
      const t = rules.claim(r, ref.config, calls[at]!.input.worker, tx.now);
      tx.stage(ref, loaded, t);
      out[at]!.push(claimedOf(t.record));
    }
    settled();
    // A page short of what was asked for took every claimable row there was: asking again
    // would find none (and would see what later calls of this transaction posted meanwhile).
    if (rows.length < limit) break;
  }
  return out;
}

/**
 * decisions §8.5: a claim that came up short and asked why (`held`) says `paused` when its queue
 * is paused. One probe of svcq_queues, made only then: a claim that got what it asked for, or
 * whose caller does not ask, pays nothing.
 */
export async function heldByPause(tx: Tx, ref: QueueRef, claims: ReadonlyArray<{ input: ClaimInput; short: boolean }>): Promise<void> {
  const asking = claims.filter((c) => c.short && c.input.held && !c.input.signal?.aborted);
  if (asking.length === 0) return;
  const res = await tx.query<{ paused: boolean }>(named('svcq_claim_paused', 'SELECT paused FROM svcq_queues WHERE key = $1'), [ref.key]);
  if (res.rows[0]?.paused !== true) return;
  for (const c of asking) {
    c.input.held!.reason = 'paused';
    delete c.input.held!.retryAt;
  }
}

/**
 * Leases up to `max` of the oldest claimable items that pass the criteria. The pending rows are
 * read in claim order a page at a time without locks (narrowed by the database where that keeps
 * the semantics exactly, see pg-criteria.ts), matched here with the engine's `matches()`
 * (decisions §3.3: one definition of matching), and only the matching ones are locked (SKIP
 * LOCKED), so FIFO holds among matching items and a claim never holds rows it does not take.
 */
export async function claimMatching(tx: Tx, ref: QueueRef, input: ClaimInput, criteria: Record<string, unknown>, max: number): Promise<Claimed[]> {
  const out: Claimed[] = [];
  if (tx.requeued(ref.key)) await tx.flush();
  const prefilter = prefilterOf(criteria);
  let after = -1;
  let afterRank = -1000;
  while (out.length < max) {
    if (input.signal?.aborted) break;
    const need = max - out.length;
    const page = (
      await tx.query<{ id: string; ord: number; priority: number; body: string }>(
        named('svcq_claim_page', `SELECT id, ord, priority, body FROM svcq_items
          WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND ((-priority), ord) > ($2::integer, $3) AND ${NOT_PAUSED}
            AND ${PREFILTER_SQL}
          ORDER BY (-priority), ord LIMIT $4`, 'custom-ordered'),
        [ref.key, afterRank, after, CLAIM_PAGE, ...prefilter],
      )
    ).rows;
    if (page.length === 0) break;
    const matching = page.filter((p) => passes(p.body, criteria));
    const candidates = matching.slice(0, need);
    const last = candidates.length < matching.length ? candidates[candidates.length - 1]! : page[page.length - 1]!;
    after = last.ord;
    afterRank = -last.priority;
    if (candidates.length === 0) continue;
    const rows = (
      await tx.query<ItemRow>(
        // The status is tested as (…) IS TRUE, which no partial index's condition is proved
        // from: with statistics taken while nothing was pending, status = 'pending' had the rows
        // found by reading every live item of the queue; now each id is probed by primary key.
        named('svcq_claim_matching', `SELECT ${COLUMNS} FROM svcq_items
          WHERE queue = $1 AND id = ANY($2::text[]) AND (status = 'pending') IS TRUE AND available_at <= $3
          ORDER BY (-priority), ord FOR UPDATE SKIP LOCKED`),
        [ref.key, candidates.map((c) => c.id), tx.now],
      )
    ).rows;
    for (const row of rows) {
      if (out.length >= max) break;
      // Locked now, and read as it is now: another node may have applied a deadline to it
      // meanwhile, or this transaction changed it already.
      const loaded = tx.current(ref, row);
      if (!loaded) continue;
      const r = applyDue(tx, ref, loaded);
      if (!r || !rules.claimable(r, tx.now)) continue;
      const t = rules.claim(r, ref.config, input.worker, tx.now);
      tx.stage(ref, loaded, t);
      out.push(claimedOf(t.record));
    }
  }
  return out;
}

/** decisions §3.3 by the engine's own `matches`; a body that is not a JSON object matches nothing. */
export function passes(body: string, criteria: Record<string, unknown>): boolean {
  let item: unknown;
  try {
    item = JSON.parse(body);
  } catch {
    return false;
  }
  return item !== null && typeof item === 'object' && !Array.isArray(item) && matches(item as Record<string, unknown>, criteria);
}
