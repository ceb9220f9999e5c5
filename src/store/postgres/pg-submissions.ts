// Submissions on the PostgreSQL store (progress, result, error, cancel): those of one queue in a
// transaction lock their rows with one statement and apply the rules in the order they were made.
import * as rules from '../../engine/rules.js';
import type { ItemRecord, Submission } from '../../engine/rules.js';
import type { PayloadKind, QueueRef, SubmitOutcome } from '../store.js';
import { applyDue, COLUMNS, named, type ItemRow, type Loaded, type Tx } from './pg-tx.js';

export interface SubmissionCall {
  id: string;
  apply: (r: ItemRecord, now: number) => Submission;
  /** The payload an accepted submission archives (progress, result, error; none for a cancel). */
  payload?: { kind: PayloadKind; body: string };
  /** Whether it can make its item pending again (an error handed in with attempts left); no other submission can. */
  requeues?: boolean;
}

/**
 * Submissions to one queue, in the order they were made: their rows locked with one statement
 * (in id order, the same order on every node, so that two such transactions do not deadlock),
 * what is due applied to each first, then each rule in turn (two submissions for one item see
 * each other, as one after the other), all written with one UPDATE. `before`: what must be
 * applied first (the groups of the transaction folded before these).
 */
export async function submitMany(tx: Tx, ref: QueueRef, calls: readonly SubmissionCall[], before?: Promise<unknown>): Promise<Array<SubmitOutcome | null>> {
  const ids = [...new Set(calls.map((c) => c.id))];
  // Written as a join with the ids (not `id = ANY($2)`), so that the plan kept from an empty table
  // probes the primary key with both columns; locked in id order, after the sort.
  const locking = tx.query<ItemRow>(
    named('svcq_lock_items', `SELECT ${COLUMNS} FROM svcq_items WHERE (queue, id) = ANY (SELECT $1, unnest($2::text[])) ORDER BY id FOR UPDATE`, 'generic'),
    [ref.key, ids],
  );
  // The groups folded before apply their answers first (see AppliedInOrder in postgres-store.ts).
  if (before) {
    locking.catch(() => undefined);
    await before;
  }
  const res = await locking;
  const loaded = new Map<string, Loaded>();
  const current = new Map<string, ItemRecord | null>();
  for (const row of res.rows) {
    const l = tx.current(ref, row);
    if (!l) continue;
    loaded.set(row.id, l);
    current.set(row.id, applyDue(tx, ref, l));
  }
  const out = calls.map((call) => {
    const r = current.get(call.id);
    if (!r) return null;
    const outcome = call.apply(r, tx.now);
    if (outcome.transition) {
      const l = loaded.get(call.id)!;
      tx.stage(ref, l, outcome.transition);
      if (outcome.accepted && call.payload) tx.archive(ref, call.id, call.payload.kind, call.payload.body);
      // What the change made due at once (a retention of 0 s purges a finished item) applies
      // before the next call, as every call applies what is due first: a later call of this
      // transaction finds the item gone, and a post finds its idempotency key free.
      const due = rules.due(outcome.transition.record, ref.config, tx.now, tx.callbackState(ref, l));
      if (due) tx.stage(ref, l, due);
      current.set(call.id, due ? (due.purged ? null : due.record) : outcome.transition.record);
    }
    return { accepted: outcome.accepted, status: outcome.status };
  });
  return out;
}
