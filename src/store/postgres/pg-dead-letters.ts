// Dead letters and bulk actions on the PostgreSQL store (decisions §8.6): the copies a
// transaction's failures call for, made before its COMMIT, and one batch of a bulk action.
import type { QueueConfig } from '../../engine/config.js';
import type { ItemStatus } from '../../engine/item.js';
import * as rules from '../../engine/rules.js';
import { DEAD_LETTER_POSTER, deadLetterKey, REDRIVE_POSTER, type BulkAction, type BulkOutcome, type PostInput, type QueueRef } from '../store.js';
import { insertPosts, type ItemIds } from './pg-posts.js';
import { applyDue, COLUMNS, named, type Failure, type ItemRow, type Loaded, type Tx } from './pg-tx.js';

/**
 * decisions §8.6: each item the transaction made failed or timed out in a queue with `deadLetter`
 * is copied to that queue when it is defined now (one INSERT per queue), in the same transaction:
 * the copy carries its source, the original its copy's id, and the failure's event names the copy
 * ("undefined" when the queue is not defined). Called once the calls have run, before the COMMIT.
 */
export async function copyDeadLetters(tx: Tx, configFor: (key: string) => QueueConfig | undefined, ids: ItemIds): Promise<void> {
  while (tx.failures.length > 0) {
    const failures = tx.failures.splice(0);
    const byTarget = new Map<string, { ref: QueueRef; list: Failure[] }>();
    for (const f of failures) {
      const key = deadLetterKey(f.ref)!;
      const config = configFor(key);
      if (!config) {
        const event = failureEvent(f);
        if (event) event.deadLetter = 'undefined';
        continue;
      }
      let target = byTarget.get(key);
      if (!target) byTarget.set(key, (target = { ref: { key, host: f.ref.host, name: f.ref.config.deadLetter!, config }, list: [] }));
      target.list.push(f);
    }
    for (const { ref, list } of byTarget.values()) {
      const inputs: PostInput[] = list.map((f) => ({ body: f.change.record.body, postedBy: DEAD_LETTER_POSTER }));
      const sources = list.map((f) => JSON.stringify(rules.deadLetterSource(f.ref.name, f.change.record)));
      const out = await insertPosts(tx, ref, inputs, ids, sources);
      for (let n = 0; n < list.length; n++) {
        const f = list[n]!;
        const copy = out[n]!.id;
        const event = failureEvent(f);
        if (event) event.deadLetter = copy;
        await tx.deadLetterMade(f.ref, f.change.record.id, copy);
      }
    }
  }
}

function failureEvent(f: Failure): rules.EventDraft | undefined {
  return f.change.events.find((e) => e.event === 'failed' || e.event === 'timedout');
}

/**
 * One atomic batch of a bulk action (see Store.bulk): up to `max` + 1 of the queue's items the
 * action applies to are locked in claim order (the one past `max` says whether more are left),
 * what is due applied to each first, then the action's rule.
 */
export async function bulkBatch(tx: Tx, ref: QueueRef, action: BulkAction, max: number, ids: ItemIds): Promise<BulkOutcome> {
  let statuses: readonly ItemStatus[];
  let sourceQueues: string[] | null = null;
  const targets = new Map<string, QueueRef>();
  if (action.kind === 'redrive') {
    // The queues the dead letters came from, as defined now: one not defined leaves its dead letters here.
    const names = await tx.query<{ name: string }>(
      named('svcq_dead_letter_sources', `SELECT DISTINCT (source::json)->>'queue' AS name FROM svcq_items WHERE queue = $1 AND status = 'pending' AND source IS NOT NULL`),
      [ref.key],
    );
    for (const { name } of names.rows) {
      const to = action.queueNamed(name);
      if (to) targets.set(name, to);
    }
    if (targets.size === 0) return { changed: 0, more: false };
    statuses = ['pending'];
    sourceQueues = [...targets.keys()];
  } else statuses = action.statuses;
  await tx.flush();
  const res = await tx.query<ItemRow>(
    named(
      'svcq_bulk_items',
      `SELECT ${COLUMNS} FROM svcq_items
        WHERE queue = $1 AND status = ANY($2::text[])
          AND ($3::text[] IS NULL OR (source IS NOT NULL AND (source::json)->>'queue' = ANY($3::text[])))
        ORDER BY (-priority), ord LIMIT $4 FOR UPDATE`,
    ),
    [ref.key, statuses, sourceQueues, max + 1],
  );
  const more = res.rows.length > max;
  const chosen: Array<{ loaded: Loaded; record: rules.ItemRecord }> = [];
  for (const row of res.rows.slice(0, max)) {
    const loaded = tx.current(ref, row);
    if (!loaded) continue;
    const record = applyDue(tx, ref, loaded);
    if (!record || !statuses.includes(record.status)) continue;
    chosen.push({ loaded, record });
  }
  let changed = 0;
  let leaseEnded = false;
  if (action.kind === 'redrive') {
    const byTarget = new Map<string, Array<{ loaded: Loaded; record: rules.ItemRecord }>>();
    for (const c of chosen) {
      const name = c.loaded.links?.source?.queue;
      if (name === undefined || !targets.has(name)) continue;
      const list = byTarget.get(name);
      if (list) list.push(c);
      else byTarget.set(name, [c]);
    }
    for (const [name, list] of byTarget) {
      const to = targets.get(name)!;
      const out = await insertPosts(tx, to, list.map((c) => ({ body: c.record.body, postedBy: REDRIVE_POSTER })), ids);
      list.forEach((c, n) => {
        tx.stage(ref, c.loaded, { record: c.record, events: [{ event: 'redriven', redrivenTo: `${to.name}/${out[n]!.id}` }], purged: true });
        changed++;
      });
    }
  } else {
    for (const { loaded, record } of chosen) {
      const t = action.kind === 'retry' ? rules.retryAgain(record, tx.now) : rules.cancel(record, tx.now).transition;
      if (!t) continue;
      if (record.status === 'claimed' || record.status === 'processing') leaseEnded = true;
      tx.stage(ref, loaded, t);
      // What the change made due at once (a retried item whose timeout, counted from postedAt, has
      // passed) is applied with it, in the same transaction, as the other stores apply it.
      applyDue(tx, ref, { ...loaded, record: t.record });
      changed++;
    }
  }
  // decisions §8.5: leases ended in a queue with limits: held claims look again once this commits.
  if (leaseEnded && (ref.config.maxActive !== null || ref.config.groupMaxActive !== null)) tx.resumed.add(ref.key);
  return { changed, more };
}
