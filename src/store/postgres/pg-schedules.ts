// Schedules on the PostgreSQL store (decisions §8.3): each schedule's state is a row of
// svcq_schedules, locked and updated conditionally in the same transaction as the INSERT of the
// items its occurrences post, so however many nodes tick, each occurrence passes once.
import { isTerminal, type ItemStatus } from '../../engine/item.js';
import { planSchedule, postedBy, scheduledOptions, scheduleView, type ScheduleState, type ScheduleView } from '../../engine/schedules.js';
import type { PostInput, QueueRef } from '../store.js';
import { insertPosts, type ItemIds } from './pg-posts.js';
import { named, type Tx } from './pg-tx.js';

interface ScheduleRow {
  name: string;
  spec_hash: string;
  passed_at: number;
  last_at: number | null;
  last_id: string | null;
}

function stateOf(row: ScheduleRow): ScheduleState {
  return { hash: row.spec_hash, passedAt: Number(row.passed_at), lastAt: row.last_at === null ? null : Number(row.last_at), lastId: row.last_id };
}

/**
 * One tick of the queue's schedules at the transaction's time (see Store.tickSchedules). Rows of
 * schedules no longer defined are deleted; a new schedule's row is inserted as started now. The
 * rows are then locked `FOR UPDATE SKIP LOCKED`: a row another node's tick holds is that node's to
 * apply (it commits what it posts with the row). Each row is written back only if it still is
 * behind what this tick passes (`passed_at < $new`, or another definition): a second guard should
 * a row ever be read stale.
 */
export async function tickSchedules(tx: Tx, ref: QueueRef, ids: ItemIds): Promise<number> {
  const specs = ref.config.schedules;
  const names = specs.map((s) => s.name);
  await tx.query(named('svcq_schedules_forget', 'DELETE FROM svcq_schedules WHERE queue = $1 AND NOT (name = ANY($2::text[]))'), [ref.key, names]);
  if (specs.length === 0) return 0;
  await tx.query(
    named('svcq_schedules_start', 'INSERT INTO svcq_schedules (queue, name, spec_hash, passed_at) SELECT $1, n, h, $4 FROM unnest($2::text[], $3::text[]) AS t(n, h) ON CONFLICT (queue, name) DO NOTHING'),
    [ref.key, names, specs.map((s) => s.hash), tx.now],
  );
  const { rows } = await tx.query<ScheduleRow>(
    named('svcq_schedules_lock', 'SELECT name, spec_hash, passed_at, last_at, last_id FROM svcq_schedules WHERE queue = $1 AND name = ANY($2::text[]) ORDER BY name FOR UPDATE SKIP LOCKED'),
    [ref.key, names],
  );
  const states = new Map(rows.map((r) => [r.name, stateOf(r)]));
  // overlap "skip": is the item of each schedule's last occurrence still live?
  const watched = specs.filter((s) => s.overlap === 'skip' && states.get(s.name)?.lastId != null).map((s) => states.get(s.name)!.lastId!);
  const live = new Set<string>();
  if (watched.length > 0) {
    const res = await tx.query<{ id: string; status: ItemStatus }>(named('svcq_schedules_live', 'SELECT id, status FROM svcq_items WHERE queue = $1 AND id = ANY($2::text[])'), [ref.key, watched]);
    for (const r of res.rows) if (!isTerminal(r.status)) live.add(r.id);
  }
  const inputs: PostInput[] = [];
  const posting: Array<{ name: string; at: number }> = [];
  const next = new Map<string, ScheduleState>();
  for (const spec of specs) {
    const state = states.get(spec.name);
    if (!state) continue; // another node's tick holds it
    const plan = planSchedule(spec, state, tx.now, state.lastId !== null && live.has(state.lastId));
    if (!plan.state) continue;
    next.set(spec.name, { ...plan.state });
    for (const at of plan.post) {
      inputs.push({ body: spec.item, postedBy: postedBy(spec.name), options: scheduledOptions(spec) });
      posting.push({ name: spec.name, at });
    }
  }
  if (next.size === 0) return 0;
  if (inputs.length > 0) {
    const from = tx.changes.length;
    const outcomes = await insertPosts(tx, ref, inputs, ids);
    const byId = new Map(tx.changes.slice(from).map((c) => [c.record.id, c]));
    outcomes.forEach((o, n) => {
      const { name, at } = posting[n]!;
      const change = byId.get(o.id);
      if (change) change.events = [{ event: 'posted', schedule: name, occurrence: at }];
      const state = next.get(name)!;
      state.lastAt = at;
      state.lastId = o.id;
    });
  }
  const written = [...next.entries()];
  const res = await tx.query(
    named(
      'svcq_schedules_write',
      `UPDATE svcq_schedules AS s SET spec_hash = u.h, passed_at = u.p, last_at = u.la, last_id = u.li
         FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[]) AS u(n, h, p, la, li)
        WHERE s.queue = $1 AND s.name = u.n AND (s.passed_at < u.p OR s.spec_hash <> u.h)`,
    ),
    [ref.key, written.map(([n]) => n), written.map(([, s]) => s.hash), written.map(([, s]) => s.passedAt), written.map(([, s]) => s.lastAt), written.map(([, s]) => s.lastId)],
  );
  // Rows locked by this transaction cannot have moved: a row that did is a bug, and nothing of this tick may stand.
  if (res.rowCount !== written.length) throw new Error(`schedules of ${ref.key} changed under their tick (${res.rowCount} of ${written.length} written)`);
  return inputs.length;
}

/** The queue's schedules as the operators' view shows them (a read outside any transaction). */
export async function readSchedules(read: (text: { name: string; text: string }, values: unknown[]) => Promise<{ rows: ScheduleRow[] }>, ref: QueueRef, now: number): Promise<ScheduleView[]> {
  if (ref.config.schedules.length === 0) return [];
  const { rows } = await read(named('svcq_schedules_read', 'SELECT name, spec_hash, passed_at, last_at, last_id FROM svcq_schedules WHERE queue = $1'), [ref.key]);
  const states = new Map(rows.map((r) => [r.name, stateOf(r)]));
  return ref.config.schedules.map((spec) => scheduleView(spec, states.get(spec.name), now));
}
