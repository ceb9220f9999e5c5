// Posts on the PostgreSQL store: the posts of one queue in a transaction become one multi-row
// INSERT, idempotency keys resting on the unique index.
import { RandomIds } from '../random-ids.js';
import type { ItemStatus } from '../../engine/item.js';
import * as rules from '../../engine/rules.js';
import type { ItemRecord } from '../../engine/rules.js';
import type { PostInput, PostOutcome, QueueRef } from '../store.js';
import { named, type Tx } from './pg-tx.js';

/** A node's source of item ids, and the queues it knows to be registered in svcq_queues. */
export class ItemIds {
  /** Queues known to be in svcq_queues already. */
  readonly known = new Set<string>();
  private readonly ids = new RandomIds();

  /** 16 lowercase hex characters, random (decisions §3.5); a collision in the queue is caught by the primary key. */
  next(): string {
    return this.ids.next();
  }
}

/**
 * Creates the items of one or more posts to a queue with one INSERT. Idempotency keys rest on
 * the unique index: `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key to
 * commit or roll back, so concurrent posts with one key create one item on every node; the
 * earlier item is then read. A key repeated within the batch names its first item.
 */
export async function insertPosts(tx: Tx, ref: QueueRef, inputs: readonly PostInput[], ids: ItemIds, sources?: ReadonlyArray<string | null>, before?: Promise<unknown>): Promise<PostOutcome[]> {
  const group = tx.groups;
  const out: Array<PostOutcome | undefined> = new Array(inputs.length);
  // Inputs whose key an earlier input of this batch carries: they name that input's item.
  const firstWithKey = new Map<string, number>();
  const repeats: Array<[number, number]> = [];
  let todo: number[] = [];
  for (let n = 0; n < inputs.length; n++) {
    const key = inputs[n]!.idempotencyKey;
    if (key !== undefined) {
      const first = firstWithKey.get(key);
      if (first !== undefined) {
        repeats.push([n, first]);
        continue;
      }
      firstWithKey.set(key, n);
    }
    todo.push(n);
  }
  // Ahead of the INSERT, in the same go (the group's statement is sent at once, in its place
  // among the transaction's): the writes, when a purge frees an idempotency key for these
  // posts, and the queue's registration, the first time this node posts to it.
  const ahead: Array<Promise<unknown>> = [];
  if (tx.purges(ref.key)) ahead.push(tx.flush());
  if (!ids.known.has(ref.key) && !tx.registered.has(ref.key)) {
    ahead.push(tx.query(named('svcq_register_queue', 'INSERT INTO svcq_queues (key) VALUES ($1) ON CONFLICT DO NOTHING'), [ref.key]));
    tx.registered.add(ref.key);
  }
  for (const p of ahead) p.catch(() => undefined);
  for (let round = 0; todo.length > 0; round++) {
    if (round === 10) throw new Error('could not create the items: their ids or idempotency keys kept colliding');
    const records = todo.map((n) => {
      const input = inputs[n]!;
      const id = ids.next();
      tx.postedBy.set(`${ref.key}\n${id}`, group);
      return rules.post({ id, ord: 0, body: input.body, postedBy: input.postedBy, idempotencyKey: input.idempotencyKey ?? null, options: input.options }, tx.now);
    });
    const first = records[0]!.record;
    const inserting = tx.query<{ id: string; ord: number }>(
      named('svcq_insert_items', `WITH input AS (
         SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS t(id, body, posted_by, idempotency_key, n)
       ), ords AS (
         SELECT v, row_number() OVER (ORDER BY v) AS n FROM (SELECT nextval('svcq_item_ord') AS v FROM generate_series(1, $6::integer)) AS s
       )
       INSERT INTO svcq_items (queue, id, ord, body, posted_by, posted_at, idempotency_key, status, updated_at, attempts, available_at, priority, grp, source, callback)
       SELECT $1, input.id, ords.v, input.body, input.posted_by, $7, input.idempotency_key, $8, $9, $10, coalesce(($11::bigint[])[input.n], 0), coalesce(($12::smallint[])[input.n], 0), ($13::text[])[input.n], ($14::text[])[input.n], ($15::text[])[input.n]
         FROM input JOIN ords USING (n) ORDER BY input.n
       ON CONFLICT DO NOTHING
       RETURNING id, ord`, 'generic'),
      [
        ref.key,
        records.map((t) => t.record.id),
        records.map((t) => t.record.body),
        records.map((t) => t.record.postedBy),
        records.map((t) => t.record.idempotencyKey),
        records.length,
        first.postedAt,
        first.status,
        first.updatedAt,
        first.attempts,
        // Post options (decisions §8.1), per item; null when none of them has any, so that a
        // plain post sends nothing more.
        records.some((t) => t.record.availableAt !== 0) ? records.map((t) => t.record.availableAt) : null,
        records.some((t) => t.record.priority !== 0) ? records.map((t) => t.record.priority) : null,
        records.some((t) => t.record.group !== null) ? records.map((t) => t.record.group) : null,
        // decisions §8.6: a dead letter's source (only dead-letter copies have one; they have no idempotency key, so no repeats).
        sources ? todo.map((n) => sources[n] ?? null) : null,
        // decisions §9.2: the items' own callback URLs, when one of them has one.
        todo.some((n) => inputs[n]!.options?.callback !== undefined) ? todo.map((n) => inputs[n]!.options?.callback ?? null) : null,
      ],
    );
    if (ahead.length > 0) {
      // Their failure, if any, is the cause (the INSERT behind it then fails too).
      inserting.catch(() => undefined);
      await Promise.all(ahead.splice(0));
    }
    // The groups folded before apply their answers first (see AppliedInOrder in postgres-store.ts).
    if (before) {
      inserting.catch(() => undefined);
      await before;
      before = undefined;
    }
    const res = await inserting;
    const ords = new Map(res.rows.map((row) => [row.id, row.ord]));
    const conflicted: number[] = [];
    records.forEach((t, i) => {
      const n = todo[i]!;
      const ord = ords.get(t.record.id);
      if (ord === undefined) return void conflicted.push(n);
      const record: ItemRecord = { ...t.record, ord };
      tx.changes.push({ ref, record, events: t.events, purged: false });
      tx.count(ref.key, record.status, 1);
      tx.archive(ref, record.id, 'item', record.body);
      out[n] = { id: record.id, status: record.status, created: true };
    });
    // Not inserted: the key names an earlier item (read it), or the random id was taken (try another).
    const keys = conflicted.map((n) => inputs[n]!.idempotencyKey).filter((k): k is string => k !== undefined);
    const earlier = new Map<string, { id: string; status: ItemStatus }>();
    if (keys.length > 0) {
      const found = await tx.query<{ id: string; status: ItemStatus; idempotency_key: string }>(
        named('svcq_find_keys', 'SELECT id, status, idempotency_key FROM svcq_items WHERE queue = $1 AND idempotency_key = ANY($2::text[])'),
        [ref.key, keys],
      );
      for (const row of found.rows) earlier.set(row.idempotency_key, row);
    }
    todo = [];
    for (const n of conflicted) {
      const key = inputs[n]!.idempotencyKey;
      const item = key === undefined ? undefined : earlier.get(key);
      // An earlier item purged by another node between the INSERT and the read: insert again.
      if (item) out[n] = { id: item.id, status: item.status, created: false };
      else todo.push(n);
    }
  }
  for (const [n, first] of repeats) {
    const o = out[first]!;
    out[n] = { id: o.id, status: o.status, created: false };
  }
  return out as PostOutcome[];
}
