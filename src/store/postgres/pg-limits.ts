// Flow control on the PostgreSQL store (decisions §8.5): maxActive, groupMaxActive and rateLimit
// checked in the claim's own transaction under a per-queue limiter row, and groups fairness read
// from a table of groups. See docs/postgresql-flow.md for the design and the plans.
import type { QueueConfig } from '../../engine/config.js';
import { groupKey, hasLimits, type HoldReason } from '../../engine/limits.js';
import * as rules from '../../engine/rules.js';
import { claimedOf, type Claimed, type QueueRef } from '../store.js';
import { claimMatching, claimPlain, heldByPause, NOT_PAUSED, passes, type PlainClaim } from './pg-claims.js';
import { LockedLate } from './pg-errors.js';
import { applyDue, COLUMNS, named, type ItemRow, type Tx } from './pg-tx.js';

/** Whether claims on a queue go through its limiter row (a limit, or groups fairness). */
export function limited(config: QueueConfig): boolean {
  return hasLimits(config) || config.fairness === 'groups';
}

/** Whether a queue's claims pick by groups (fairness, or a limit per group), so that its items' wakes are kept. */
export function grouped(config: QueueConfig): boolean {
  return config.groupMaxActive !== null || config.fairness === 'groups';
}

/** Whether a queue has groups fairness and no limit: its claims count nothing (see claimFair). */
export function fairOnly(config: QueueConfig): boolean {
  return config.fairness === 'groups' && !hasLimits(config);
}

/** Whether a lease ending in the queue may let a held claim through at once (decisions §8.5). */
export function wakesOnLeaseEnd(config: QueueConfig): boolean {
  return config.maxActive !== null || config.groupMaxActive !== null;
}

/**
 * Whether the plain claims of a queue under its limiter row take one statement (see
 * claimCounted), so that the calls folded after them can be sent behind it without waiting:
 * what they make of the table comes after that statement, as they were made after the claims.
 */
export function countedInOne(config: QueueConfig): boolean {
  return (config.maxActive !== null || config.rateLimit !== null) && !grouped(config);
}

/**
 * Whether the plain claims of a limited queue take one statement that the calls folded after them
 * are sent behind at once: those of {@link countedInOne}, and those by groups fairness alone
 * (see claimFair).
 */
export function claimsInOne(config: QueueConfig): boolean {
  return countedInOne(config) || fairOnly(config);
}

/** Claimable items a claim with criteria held back by a limit reads to see whether one matches. */
const MORE_LOOK = 500;
/** A criteria claim by groups looks at this many groups per item it takes, at most ... */
const LOOK_GROUPS = 50;
/** ... and at this many claimable items of each. */
const LOOK_ITEMS = 50;

/** The limiter row of a queue as this transaction holds it (locked until COMMIT). */
interface Limiter {
  /** Whether the queue's rules (when locked) have a rateLimit: only then are leases noted. */
  rated: boolean;
  rateMax: number;
  rateCount: number;
  /** Leases this transaction noted, in order (their slots follow rateCount's value when locked). */
  noted: number;
  /** rateCount when locked (after a resize). */
  lockedCount: number;
}

/**
 * The rate window's room for the next leases: how many of the slots they would overwrite were last
 * filled at or before `threshold` (a window before the leases' time), counted from the oldest; and
 * those slots' times (`read`, oldest first), as this transaction must count them. The leases it
 * noted itself reach svcq_rate_slots only with its last writes (finishLimits), so a slot that one of
 * them fills still reads there as the lease before it, a window or more ago: such a slot is taken
 * as filled now. Together, a transaction's claims never lease more than `max` within the window.
 * Without a rateLimit, no room is counted.
 */
function rateRoom(read: readonly number[], lim: Limiter, rate: QueueConfig['rateLimit'], now: number, threshold: number): { slotTimes: number[]; roomRate: number } {
  if (!rate) return { slotTimes: [...read], roomRate: Infinity };
  const slotTimes = read.map((at, i) => (lim.noted + i >= rate.max ? Math.max(at, now) : at));
  let roomRate = 0;
  while (roomRate < slotTimes.length && slotTimes[roomRate]! <= threshold) roomRate++;
  return { slotTimes, roomRate };
}

/** Per transaction, the limiter rows it locked, by queue. */
const limiters = new WeakMap<Tx, Map<string, Limiter>>();
/** Per transaction, its lock of the limiter rows (answered or not). */
const locks = new WeakMap<Tx, Promise<void>>();
/** The changes of a transaction already turned into group wakes (see {@link finishLimits}). */
const woken = new WeakMap<Tx, number>();
/**
 * The queues whose group heads a store has rebuilt under the definition in force: one per store,
 * since each store may be on a database of its own. Items made claimable while a queue had no
 * groups (no limit per group, no fairness) left no wakes, so a claim by groups rebuilds the heads
 * from the items first when this store has not done so yet, when a call was made here under
 * rules without groups since, and when the definition changed (in value: the rules object of a
 * definition may be made afresh without a change, and a change may go back to an earlier value).
 */
export class GroupRebuilds {
  /** What each queue's last call's rules said, by queue key. */
  private readonly rules = new Map<string, { config: QueueConfig; text: string }>();
  /** Queues whose heads were rebuilt under the rules in `rules`, no call without groups made since. */
  private readonly fresh = new Set<string>();
  private readonly texts = new WeakMap<QueueConfig, string>();

  /** Notes the rules a call on the queue was made under. */
  saw(ref: QueueRef): void {
    if (!grouped(ref.config)) {
      this.fresh.delete(ref.key);
      return;
    }
    const was = this.rules.get(ref.key);
    if (was?.config === ref.config) return;
    let text = this.texts.get(ref.config);
    if (text === undefined) this.texts.set(ref.config, (text = JSON.stringify(ref.config)));
    if (was?.text !== text) this.fresh.delete(ref.key);
    this.rules.set(ref.key, { config: ref.config, text });
  }

  /** Whether a claim by groups must rebuild the queue's heads first. */
  due(ref: QueueRef): boolean {
    this.saw(ref);
    return !this.fresh.has(ref.key);
  }

  rebuilt(ref: QueueRef): void {
    this.fresh.add(ref.key);
  }
}

/**
 * Locks the limiter rows of the queues whose claims the transaction will make, in key order, at
 * its very start: before any item row, so that a transaction holding an item's lock never waits
 * for a limiter row (which another, holding that row, might hold while it waits for the item).
 * A row missing is made first. Moves the transaction's time at least to the last noted lease's,
 * so that leases are noted in order across nodes. Resizes the rate window when its `max` changed.
 *
 * `early`: the transaction's next statements are sent behind this one without waiting for its
 * answer (they run after it, so the order of the locks holds): a row missing cannot be made
 * then, ahead of them, nor a window resized before they read it, and the transaction runs again
 * ({@link LockedLate}).
 */
export function lockLimiters(tx: Tx, refs: readonly QueueRef[], early = false): Promise<void> {
  const locking = lockRows(tx, refs, early);
  locks.set(tx, locking);
  return locking;
}

async function lockRows(tx: Tx, refs: readonly QueueRef[], early: boolean): Promise<void> {
  const keys = [...new Set(refs.map((r) => r.key))].sort();
  type Row = { queue: string; rate_max: number; rate_count: number; last_at: number };
  const read = (): Promise<{ rows: Row[] }> =>
    // Kept plans, as the statements around it: a probe of the primary key whatever the table's size, and no switch of plans between them.
    tx.query<Row>(named('svcq_lock_limiters', 'SELECT queue, rate_max, rate_count, last_at FROM svcq_limiters WHERE queue = ANY($1::text[]) ORDER BY queue FOR UPDATE', 'generic'), [keys]);
  let { rows } = await read();
  if (rows.length < keys.length && early) throw new LockedLate('a limiter row is missing');
  if (rows.length < keys.length) {
    await tx.query(named('svcq_add_limiters', 'INSERT INTO svcq_limiters (queue) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (queue) DO NOTHING'), [keys]);
    ({ rows } = await read());
  }
  const held = new Map<string, Limiter>();
  for (const row of rows) {
    if (row.last_at > tx.now) tx.now = row.last_at;
    held.set(row.queue, { rated: false, rateMax: row.rate_max, rateCount: row.rate_count, noted: 0, lockedCount: row.rate_count });
  }
  limiters.set(tx, held);
  for (const ref of refs) {
    const lim = held.get(ref.key);
    const rate = ref.config.rateLimit;
    if (lim && rate) lim.rated = true;
    if (lim && rate && lim.rateMax !== rate.max) {
      // The statements sent behind the lock read the window at its old size.
      if (early) throw new LockedLate(`the rate window of ${ref.key} is to be resized`);
      await resize(tx, ref.key, lim, rate.max);
    }
  }
}

/**
 * Follows a changed rate `max` as RateRing.resize does: the most recent leases noted (as many as
 * both sizes hold) keep counting, in slots 0, 1, … of the new window.
 */
async function resize(tx: Tx, key: string, lim: Limiter, max: number): Promise<void> {
  const keep = lim.rateMax === 0 ? 0 : Math.min(max, lim.rateMax, lim.rateCount);
  const slots: number[] = [];
  for (let k = lim.rateCount - keep; k < lim.rateCount; k++) slots.push(k % lim.rateMax);
  const kept = (
    await tx.query<{ at: string | number }>(
      named('svcq_rate_kept', 'SELECT s.at FROM unnest($2::integer[]) WITH ORDINALITY AS u(slot, n) JOIN svcq_rate_slots s ON s.queue = $1 AND s.slot = u.slot ORDER BY u.n'),
      [key, slots],
    )
  ).rows.map((r) => Number(r.at));
  await tx.query(named('svcq_rate_clear', 'DELETE FROM svcq_rate_slots WHERE queue = $1'), [key]);
  await tx.query(
    named(
      'svcq_rate_resize',
      `WITH put AS (INSERT INTO svcq_rate_slots (queue, slot, at) SELECT $1, n - 1, at FROM unnest($2::bigint[]) WITH ORDINALITY AS u(at, n))
       UPDATE svcq_limiters SET rate_max = $3, rate_count = $4 WHERE queue = $1`,
    ),
    [key, kept, max, kept.length],
  );
  const keepCount = kept.length;
  lim.rateMax = max;
  lim.rateCount = keepCount;
  lim.lockedCount = keepCount;
}

/** A claim on a limited queue: plain, or with criteria. */
export interface LimitedClaim extends PlainClaim {
  criteria?: Record<string, unknown>;
}

/**
 * Claims on a queue with a limit or groups fairness, in the order they were made, under its
 * limiter row (locked by {@link lockLimiters}): how many may be leased (maxActive less what is
 * leased, the rate window's room) is shared out in order, then the items are taken in claim order
 * (pg-claims.ts) or by groups (svcq_claim_groups). A claim that got less than it asked for because
 * of a limit, while more was claimable, says why in `input.held`.
 */
export async function claimLimited(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], now: () => number, rebuilt: GroupRebuilds, before?: Promise<unknown>): Promise<Claimed[][]> {
  const config = ref.config;
  const asks = calls.map((c) => (c.input.signal?.aborted ? 0 : c.max));
  const wanted = asks.reduce((a, b) => a + b, 0);
  // Plain claims in claim order under maxActive or a rateLimit: counted and taken by one
  // statement, which may be sent before the limiter row's lock is answered.
  if (countedInOne(config) && calls.every((c) => c.criteria === undefined)) return claimCounted(tx, ref, calls, asks, now, before);
  if (fairOnly(config) && calls.every((c) => c.criteria === undefined)) return claimFair(tx, ref, calls, asks, rebuilt, before);
  const lim = limiters.get(tx)?.get(ref.key);
  if (!lim) throw new Error(`the limiter row of ${ref.key} is not locked by this transaction`);
  const rate = config.rateLimit;
  // The rate window's slots the next leases would overwrite, oldest first.
  const slotsToRead = rate ? Math.min(wanted + 1, rate.max) : 0;
  const slotNumbers: number[] = [];
  for (let i = 0; i < slotsToRead; i++) slotNumbers.push((lim.rateCount + lim.noted + i) % rate!.max);
  // Without maxActive or a rateLimit nothing is counted here (groups are counted by svcq_claim_groups).
  const counting = config.maxActive !== null || rate !== null;
  // What this transaction changed so far is in the table before anything is counted.
  await tx.flush();
  const state = !counting
    ? { paused: false, leased: 0, slots: null, at: null }
    : (
    await tx.query<{ paused: boolean; leased: number; slots: Array<number | string> | null; at: Array<number | string> | null }>(
      named(
        'svcq_limits_state',
        `SELECT EXISTS (SELECT 1 FROM svcq_queues WHERE key = $1 AND paused) AS paused,
                (SELECT count(*) FROM (SELECT 1 FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing') LIMIT $2) AS l)::integer AS leased,
                (SELECT array_agg(slot) FROM svcq_rate_slots WHERE queue = $1 AND slot = ANY($3::integer[])) AS slots,
                (SELECT array_agg(at) FROM svcq_rate_slots WHERE queue = $1 AND slot = ANY($3::integer[])) AS at`,
      ),
      [ref.key, config.maxActive ?? 0, slotNumbers],
    )
  ).rows[0]!;
  // The claims' time is no earlier than that count: a lease it saw end ended before it.
  const counted = now();
  if (counted > tx.now) tx.now = counted;
  if (state.paused) {
    for (let i = 0; i < calls.length; i++) if (asks[i]! > 0) hold(calls[i]!, 'paused');
    return calls.map(() => []);
  }
  const times = new Map<number, number>();
  // bigint[] comes back as text.
  (state.slots ?? []).forEach((s, i) => times.set(Number(s), Number(state.at![i]!)));
  const { slotTimes, roomRate } = rateRoom(slotNumbers.map((n) => times.get(n) ?? -Infinity), lim, rate, tx.now, rate ? tx.now - rate.windowMs : 0);
  const roomActive = config.maxActive === null ? Infinity : Math.max(0, config.maxActive - state.leased);
  const capped = share(calls, asks, Math.min(roomActive, roomRate));
  const out = await take(tx, ref, capped, rebuilt);
  lim.noted += out.reduce((a, o) => a + o.items.length, 0);
  await explainHeld(tx, ref, calls, asks, capped, out, { roomActive, roomRate, slotTimes });
  // The pause, when it was not read with the counts, is read only for a claim that came up short.
  if (!counting) await heldByPause(tx, ref, calls.map((c, i) => ({ input: c.input, short: out[i]!.items.length < asks[i]! })));
  return out.map((o) => o.items);
}

/** The claims capped in the order they were made, so that together they take at most `room`. */
function share(calls: readonly LimitedClaim[], asks: readonly number[], room: number): LimitedClaim[] {
  let left = room;
  return calls.map((c, i) => {
    const n = Math.min(asks[i]!, left);
    left -= n;
    return { ...c, max: n };
  });
}

/** What held the claims back: the room maxActive and the rate window left, and the times of the rate slots read (oldest first; -Infinity: never used). */
interface Room {
  roomActive: number;
  roomRate: number;
  slotTimes: number[];
}

/** Says why each claim that got less than it asked for was held back (decisions §8.5), where a limit did. */
async function explainHeld(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], asks: readonly number[], capped: readonly LimitedClaim[], out: readonly Taken[], room: Room, group = tx.groups): Promise<void> {
  const rate = ref.config.rateLimit;
  const got = out.reduce((a, o) => a + o.items.length, 0);
  let more: boolean | undefined;
  for (let i = 0; i < calls.length; i++) {
    if (out[i]!.items.length >= asks[i]!) continue;
    // maxActive or the rate window held the claim back only when it took all they left it; one
    // that took less stopped for another reason (a group at groupMaxActive, say).
    if (capped[i]!.max < asks[i]! && out[i]!.items.length >= capped[i]!.max) {
      // Items posted by calls folded after these claims (sent behind them, see countedInOne) are not theirs to see.
      const takenIds = [...out.flatMap((o) => o.items.map((c) => c.id)), ...postedAfter(tx, ref, group)];
      const criteria = calls[i]!.criteria;
      const wouldTake = criteria === undefined ? (more ??= await moreClaimable(tx, ref, takenIds)) : await moreMatching(tx, ref, takenIds, criteria);
      if (!wouldTake) continue;
      // The first limit that binds, in the order of decisions §8.5.
      if (room.roomActive <= room.roomRate) hold(calls[i]!, 'maxActive');
      else hold(calls[i]!, 'rateLimit', got < room.slotTimes.length ? room.slotTimes[got]! + rate!.windowMs : tx.now + rate!.windowMs);
    } else if (out[i]!.saturated) hold(calls[i]!, 'groupMaxActive');
  }
}

/** The items of the queue that calls of the transaction folded after group `group` posted. */
function postedAfter(tx: Tx, ref: QueueRef, group: number): string[] {
  const ids: string[] = [];
  const prefix = `${ref.key}\n`;
  for (const [slot, g] of tx.postedBy) if (g > group && slot.startsWith(prefix)) ids.push(slot.slice(prefix.length));
  return ids;
}

/**
 * Plain claims on a queue with maxActive or a rateLimit and no groups, in the order they were
 * made: one statement, sent behind the writes this transaction staged so far (in the same go),
 * reads the pause, counts the leased items and the rate window's room (the slots the next leases
 * would overwrite, as {@link claimLimited} reads them), and takes at most what they leave, in
 * claim order (`FOR UPDATE SKIP LOCKED`). The rate window's room is counted against the
 * transaction's time when the statement is sent, and the leases are stamped with the time its
 * answer came (no earlier than any lease end it counted): the window can only be read as fuller
 * than it is when the leases happen, never emptier.
 */
async function claimCounted(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], asks: readonly number[], now: () => number, before?: Promise<unknown>): Promise<Claimed[][]> {
  const config = ref.config;
  const rate = config.rateLimit;
  const wanted = asks.reduce((a, b) => a + b, 0);
  const group = tx.groups;
  // How many of the rate window's slots the next leases would overwrite (read oldest first).
  const slotsToRead = rate ? Math.min(wanted + 1, rate.max) : 0;
  // What this transaction changed so far is in the table before anything is counted: the
  // writes go ahead of the claim, in the same go.
  const ahead = tx.flush();
  ahead.catch(() => undefined);
  const threshold = rate ? tx.now - rate.windowMs : 0;
  // Leases earlier claims of this transaction noted (a claim with criteria folded before these):
  // the slots they fill are not in the table yet (see rateRoom), so the statement takes at
  // most what the window leaves beside them.
  const noted = limiters.get(tx)?.get(ref.key)?.noted ?? 0;
  const reading = tx.query<ItemRow & { paused: boolean; leased: number; ats: Array<number | string | null> | null }>(
    named(
      'svcq_claim_counted',
      `WITH st AS MATERIALIZED (
         SELECT EXISTS (SELECT 1 FROM svcq_queues WHERE key = $1 AND paused) AS paused,
                CASE WHEN $2::integer > 0 THEN (SELECT count(*) FROM (SELECT 1 FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing') LIMIT $2) AS l)::integer ELSE 0 END AS leased,
                -- The slots the next leases overwrite, from the limiter row as locked (a window of another size was resized first, see lockLimiters).
                -- Each slot one probe of the primary key (a subquery per slot): joined, the generic plan hashed every slot of the
                -- queue (as many as rateLimit.max) on every claim.
                (SELECT array_agg((SELECT s.at FROM svcq_rate_slots s WHERE l.rate_max > 0 AND s.queue = $1 AND s.slot = (l.rate_count + $6::bigint + k.n) % l.rate_max) ORDER BY k.n)
                   FROM svcq_limiters AS l CROSS JOIN generate_series(0, $3::integer - 1) AS k(n)
                  WHERE l.queue = $1) AS ats
       ), room AS MATERIALIZED (
         -- least() passes over a NULL: no rateLimit (no slots read) leaves the other bounds.
         SELECT CASE WHEN paused THEN 0
                     ELSE least($5::integer, CASE WHEN $2::integer > 0 THEN greatest(0, $2::integer - leased) END,
                                (SELECT coalesce(min(a.n) - 1, cardinality(ats)) FROM unnest(ats) WITH ORDINALITY AS a(at, n) WHERE a.at > $4::bigint)::integer) END AS n
           FROM st
       ), c AS (
         SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at = 0
          ORDER BY (-priority), ord LIMIT (SELECT n FROM room) FOR UPDATE SKIP LOCKED
       )
       SELECT st.paused, st.leased, st.ats, c.* FROM st LEFT JOIN c ON true`,
      'ordered',
    ),
    [ref.key, config.maxActive ?? 0, slotsToRead, threshold, rate ? Math.min(wanted, Math.max(0, rate.max - noted)) : wanted, noted],
  );
  reading.catch(() => undefined);
  await ahead;
  // The groups folded before apply their answers first (see AppliedInOrder in postgres-store.ts).
  if (before) await before;
  const res = await reading;
  // Answered before the claim (it was sent first).
  await locks.get(tx);
  const lim = limiters.get(tx)?.get(ref.key);
  if (!lim) throw new Error(`the limiter row of ${ref.key} is not locked by this transaction`);
  // Under maxActive the claims' time is no earlier than that count: a lease it saw end ended
  // before it. Under a rate limit alone the leases keep the transaction's time (no earlier than
  // the last noted lease, see lockLimiters), against which the window's room was counted: each
  // lease is then at least the window after the one whose slot it takes, and the window moves on
  // as the slots were freed, not a round trip and a wait for the limiter row later each time
  // (which, over thirty windows in turn, leased 3% fewer than the limit on three nodes).
  if (config.maxActive !== null) {
    const counted = now();
    if (counted > tx.now) tx.now = counted;
  }
  const first = res.rows[0]!;
  if (first.paused) {
    for (let i = 0; i < calls.length; i++) if (asks[i]! > 0) hold(calls[i]!, 'paused');
    return calls.map(() => []);
  }
  const { slotTimes, roomRate } = rateRoom((first.ats ?? []).map((at) => (at === null ? -Infinity : Number(at))), lim, rate, tx.now, threshold);
  const roomActive = config.maxActive === null ? Infinity : Math.max(0, config.maxActive - first.leased);
  const room = Math.min(roomActive, roomRate);
  const capped = share(calls, asks, room);
  const rows = res.rows.filter((r) => r.id !== null).sort((a, b) => b.priority - a.priority || a.ord - b.ord);
  const out: Taken[] = calls.map(() => ({ items: [], saturated: false }));
  let at = 0;
  for (const row of rows) {
    while (at < calls.length && out[at]!.items.length >= capped[at]!.max) at++;
    if (at >= calls.length) break;
    const got = claimRow(tx, ref, row, calls[at]!.input.worker);
    if (got) out[at]!.items.push(got);
  }
  // A row found no longer claimable once locked (rare): the rest is taken page by page, as by
  // any plain claim, within what the limits left.
  if (rows.length >= Math.min(room, wanted) && out.some((o, i) => o.items.length < capped[i]!.max)) {
    const rest = capped.map((c, i) => ({ ...c, max: c.max - out[i]!.items.length }));
    const more = await claimPlain(tx, ref, rest, group);
    more.forEach((items, i) => out[i]!.items.push(...items));
  }
  lim.noted += out.reduce((a, o) => a + o.items.length, 0);
  await explainHeld(tx, ref, calls, asks, capped, out, { roomActive, roomRate, slotTimes }, group);
  return out.map((o) => o.items);
}

function hold(call: LimitedClaim, reason: HoldReason, retryAt?: number): void {
  const held = call.input.held;
  if (!held) return;
  held.reason = reason;
  if (retryAt !== undefined && Number.isFinite(retryAt)) held.retryAt = retryAt;
  else delete held.retryAt;
}

/**
 * Whether a claimable item besides those just taken passes the criteria, among the first
 * {@link MORE_LOOK} in claim order (a bounded look: a limit that held back a claim with criteria is
 * named only when a matching item lies that near).
 */
async function moreMatching(tx: Tx, ref: QueueRef, taken: string[], criteria: Record<string, unknown>): Promise<boolean> {
  const res = await tx.query<{ body: string }>(
    named('svcq_limits_more_matching', `SELECT body FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND id <> ALL ($2::text[]) ORDER BY (-priority), ord LIMIT $3`, 'custom-ordered'),
    [ref.key, taken, MORE_LOOK],
  );
  return res.rows.some((r) => passes(r.body, criteria));
}

/** Whether the queue holds a claimable item besides those just taken (one probe of the pending index). */
async function moreClaimable(tx: Tx, ref: QueueRef, taken: string[]): Promise<boolean> {
  const res = await tx.query<{ more: boolean }>(
    named('svcq_limits_more', `SELECT EXISTS (SELECT 1 FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND id <> ALL ($2::text[])) AS more`),
    [ref.key, taken],
  );
  return res.rows[0]!.more;
}

/** What one claim took, and whether a group at groupMaxActive held a claimable item it would otherwise have taken. */
interface Taken {
  items: Claimed[];
  saturated: boolean;
}

/** Takes what each (capped) claim may take: in claim order, or by groups. */
async function take(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], rebuilt: GroupRebuilds): Promise<Taken[]> {
  const out: Taken[] = [];
  if (!grouped(ref.config)) {
    // One locking read for the plain claims (pg-claims.ts), then each claim with criteria.
    const plain = calls.filter((c) => c.criteria === undefined && c.max > 0);
    const plainOut = plain.length > 0 ? await claimPlain(tx, ref, plain) : [];
    let at = 0;
    for (const c of calls) {
      if (c.max <= 0) out.push({ items: [], saturated: false });
      else if (c.criteria === undefined) out.push({ items: plainOut[at++]!, saturated: false });
      else out.push({ items: await claimMatching(tx, ref, c.input, c.criteria, c.max), saturated: false });
    }
    return out;
  }
  // Items this transaction made claimable so far (flushed by claimLimited) are woken first.
  await writeWakes(tx);
  if (rebuilt.due(ref)) {
    await tx.query(named('svcq_rebuild_groups', 'SELECT svcq_rebuild_groups($1)'), [ref.key]);
    rebuilt.rebuilt(ref);
  }
  // The plain claims with one call of svcq_claim_groups, the earlier claim taking the earlier turns.
  const plain = calls.filter((c) => c.criteria === undefined && c.max > 0);
  const byGroups = plain.length > 0 ? await takeByGroups(tx, ref, plain) : [];
  let at = 0;
  for (const c of calls) {
    if (c.max <= 0) out.push({ items: [], saturated: false });
    else if (c.criteria === undefined) out.push(byGroups[at++]!);
    else out.push(await takeMatchingByGroups(tx, ref, c, c.criteria));
  }
  return out;
}

const PREFIXED = COLUMNS.split(', ')
  .map((c) => `i.${c}`)
  .join(', ');

/**
 * Plain claims by groups, in the order they were made: svcq_claim_groups picks and locks the items
 * for all of them at once, each item one turn, and they are handed out in that order.
 */
async function takeByGroups(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], taken: readonly string[] = []): Promise<Taken[]> {
  return handOut(tx, ref, calls, (await pickByGroups(tx, ref, calls, taken)).rows);
}

/** A row svcq_claim_groups picked (`picked` null: the last row saying a group at gmax held the claim back), or one CLAIM_FAIR_SQL took (no `picked`). */
type Picked = ItemRow & { pick?: number; picked?: string | null };

/** Sends the call of svcq_claim_groups for the claims (not awaited: see {@link claimFair}). */
function pickByGroups(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], taken: readonly string[]): Promise<{ rows: Picked[] }> {
  const config = ref.config;
  const want = calls.reduce((a, c) => a + c.max, 0);
  return tx.query<Picked>(
    named(
      'svcq_claim_groups',
      // Each item read by its primary key: joined plainly, the function's rows (estimated at a
      // thousand) were hashed against every item of the queue, for every call.
      `WITH c AS MATERIALIZED (SELECT id AS picked, n AS pick FROM svcq_claim_groups($1, $2, $3, $4, $5))
       SELECT ${PREFIXED}, c.pick, c.picked FROM c LEFT JOIN LATERAL (SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = c.picked LIMIT 1) AS i ON true ORDER BY c.pick`,
    ),
    [ref.key, want, config.groupMaxActive, config.fairness === 'groups', taken],
  );
}

/** Hands the items svcq_claim_groups picked out to the claims, in order, each applying the claim rule. */
function handOut(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], rows: readonly Picked[]): Taken[] {
  const out: Taken[] = calls.map(() => ({ items: [], saturated: false }));
  let at = 0;
  let saturated = false;
  for (const row of rows) {
    if (row.picked === null) {
      saturated = true;
      continue;
    }
    while (at < calls.length && out[at]!.items.length >= calls[at]!.max) at++;
    if (at >= calls.length || row.id === null) continue;
    const got = claimRow(tx, ref, row, calls[at]!.input.worker);
    if (got) out[at]!.items.push(got);
  }
  if (saturated) for (const o of out) o.saturated = true;
  return out;
}

/**
 * The queue's wakes folded into its groups: svcq_fold_groups's statement (migration 19), sent as
 * it is rather than through the function, whose call cost a transaction about three times the
 * statement's own time (PL/pgSQL prepares a function's expressions afresh in every transaction).
 */
function foldWakes(tx: Tx, ref: QueueRef): Promise<unknown> {
  return tx.query(
    named(
      'svcq_fold_wakes',
      `WITH d AS (DELETE FROM svcq_group_wakes x
                   WHERE x.ctid = ANY (ARRAY(SELECT y.ctid FROM svcq_group_wakes y WHERE y.queue = $1 FOR UPDATE SKIP LOCKED))
                   RETURNING x.grp, x.priority, x.ord),
            w AS (SELECT DISTINCT ON (d.grp) d.grp, d.priority, d.ord FROM d ORDER BY d.grp, d.priority DESC, d.ord)
       INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) SELECT $1, w.grp, w.priority, w.ord FROM w ORDER BY w.grp
         ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord
         WHERE s.head_p IS NULL OR EXCLUDED.head_p > s.head_p OR (EXCLUDED.head_p = s.head_p AND EXCLUDED.head_ord < s.head_ord)`,
      'generic',
    ),
    [ref.key],
  );
}

/**
 * Groups a one-statement claim by fairness reads, for `want` items: the ones it takes and one
 * more, to tell whether a group served comes back ahead of the next. Claims of the queue take
 * turns on its limiter row, so none holds the first items of the groups another claim reads; an
 * item held by another call (a cancel, a sweep) or a row out of date ends the claim's prefix
 * early, and svcq_claim_groups takes the rest. Reading three more, as this did when fair claims
 * ran beside each other, cost a claim of one item twice the reads of items it needs.
 */
const fairLook = (want: number): number => want + 1;

/**
 * What svcq_claim_groups does for plain claims by fairness, in one statement while nothing in its
 * way calls for the loop (see claimFair): the next groups in the order of the turns with their
 * first two claimable items; the longest prefix of them whose rows are up to date and that no
 * group before it comes back ahead of (its next item of a higher priority); the first items of
 * that prefix locked in order (`FOR UPDATE SKIP LOCKED`, at most `want`); their groups' rows
 * written (the turn, and the next item as the head unless another claim folded a better head in
 * since the read); the items read, in the order taken. Each answer row also says how many groups
 * were read, how many of them formed the prefix, whether the queue is paused, and (when no group
 * was read) whether a claimable item lies in the queue anyway, and whether a group served holds
 * another (a claim of more items than there are groups takes its next turn).
 */
const CLAIM_FAIR_SQL = `WITH paused AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM svcq_queues WHERE key = $1 AND paused) AS paused
  ), g AS MATERIALIZED (
    -- Numbered after the LIMIT: numbered in the index walk, the rows that tie with the last one
    -- taken (the same priority, turn and head) were read too, every one of them.
    SELECT x.grp, x.head_p, x.head_ord, row_number() OVER (ORDER BY (-x.head_p), x.turn, x.head_ord) AS rn FROM (
      SELECT s.grp, s.head_p, s.head_ord, s.turn FROM svcq_groups s
       WHERE s.queue = $1 AND s.head_p IS NOT NULL AND NOT (SELECT paused FROM paused)
       ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT $3) AS x
  ), h AS MATERIALIZED (
    SELECT g.rn, g.grp, g.head_p, g.head_ord, f.ids, f.ps, f.os, f.tids,
           max(f.ps[2]) OVER (ORDER BY g.rn ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS bound
      FROM g LEFT JOIN LATERAL (
        SELECT array_agg(i.id ORDER BY i.n) AS ids, array_agg(i.priority ORDER BY i.n) AS ps, array_agg(i.ord ORDER BY i.n) AS os, array_agg(i.ctid ORDER BY i.n) AS tids FROM (
          SELECT i.id, i.priority, i.ord, i.ctid, row_number() OVER () AS n FROM (
            SELECT i.id, i.priority, i.ord, i.ctid FROM svcq_items i
             WHERE i.queue = $1 AND coalesce(i.grp, '') = g.grp AND i.status = 'pending' AND i.available_at = 0
             ORDER BY (-i.priority), i.ord LIMIT 2) AS i) AS i) AS f ON true
  ), v AS MATERIALIZED (
    SELECT h.*, coalesce(bool_or(h.ids IS NULL OR h.ps[1] <> h.head_p OR h.os[1] <> h.head_ord OR h.head_p < h.bound) OVER (ORDER BY h.rn), false) AS broken
      FROM h
  ), l AS MATERIALIZED (
    -- Locked where the walk above found them (a row written since has moved, and is passed over).
    SELECT ${PREFIXED}, v.rn FROM v JOIN svcq_items i ON i.ctid = v.tids[1]
     WHERE NOT v.broken AND i.queue = $1 AND i.id = v.ids[1] AND (i.status = 'pending' AND i.available_at = 0) IS TRUE
     ORDER BY v.rn LIMIT $2
       FOR UPDATE OF i SKIP LOCKED
  ), s AS MATERIALIZED (
    SELECT v.rn, v.grp, v.head_p, v.head_ord, v.ps[2] AS np, v.os[2] AS nord, nextval('svcq_turns') AS t
      FROM v WHERE v.rn IN (SELECT l.rn FROM l) ORDER BY v.rn
  ), u AS (
    UPDATE svcq_groups x SET turn = s.t,
           head_p = CASE WHEN x.head_p IS NOT NULL AND (x.head_p, x.head_ord) IS DISTINCT FROM (s.head_p, s.head_ord) THEN x.head_p ELSE s.np END,
           head_ord = CASE WHEN x.head_p IS NOT NULL AND (x.head_p, x.head_ord) IS DISTINCT FROM (s.head_p, s.head_ord) THEN x.head_ord ELSE s.nord END
      FROM s WHERE x.queue = $1 AND x.grp = s.grp
  ), st AS (
    SELECT (SELECT paused FROM paused) AS paused, (SELECT count(*) FROM g)::integer AS looked, (SELECT count(*) FROM v WHERE NOT v.broken)::integer AS whole,
           CASE WHEN NOT (SELECT paused FROM paused) AND NOT EXISTS (SELECT 1 FROM g)
                THEN (SELECT 1 FROM svcq_items WHERE queue = $1 AND status = 'pending' AND available_at = 0 ORDER BY (-priority), ord LIMIT 1) IS NOT NULL
                ELSE false END AS unknown,
           coalesce((SELECT bool_or(s.np IS NOT NULL) FROM s), false) AS again
  )
  SELECT st.paused, st.looked, st.whole, st.unknown, st.again, l.* FROM st LEFT JOIN l ON true ORDER BY l.rn`;

/**
 * Plain claims on a queue with groups fairness and no limit, in the order they were made, under
 * the queue's limiter row (locked first, as for every claim by groups: claims of the queue take
 * turns on every node, so that one never finds a group passed over because another claim holds
 * its first item, nor folds a wake beside a claim that is rewriting the group's row). One
 * statement (CLAIM_FAIR_SQL) takes what it can, sent behind the writes and the wakes this
 * transaction staged so far, the wakes' fold (and a rebuild of the heads when one is due) in the
 * same go, without waiting for their answers, as a plain claim goes; the calls folded after them
 * are sent behind it at once too (see claimsInOne's use in postgres-store.ts). Where it came up
 * short with more to look at (a row out of date, a group that comes back ahead, the groups it read
 * held by other claims, a group served holding more, or no group known while an item is
 * claimable), svcq_claim_groups takes the rest, passing over what it took.
 */
async function claimFair(tx: Tx, ref: QueueRef, calls: readonly LimitedClaim[], asks: readonly number[], rebuilt: GroupRebuilds, before?: Promise<unknown>): Promise<Claimed[][]> {
  const asked = calls.map((c, i) => ({ ...c, max: asks[i]! }));
  const plain = asked.filter((c) => c.max > 0);
  const want = plain.reduce((a, c) => a + c.max, 0);
  const group = tx.groups;
  const ahead: Array<Promise<unknown> | undefined> = [tx.flush(), writeWakes(tx)];
  const rebuilding = rebuilt.due(ref);
  if (rebuilding) ahead.push(tx.query(named('svcq_rebuild_groups', 'SELECT svcq_rebuild_groups($1)'), [ref.key]));
  else ahead.push(foldWakes(tx, ref));
  type Row = Picked & { paused: boolean; looked: number; whole: number; unknown: boolean; again: boolean; rn: number | null };
  const picking = want > 0 ? tx.query<Row>(named('svcq_claim_fair', CLAIM_FAIR_SQL, 'generic'), [ref.key, want, fairLook(want)]) : undefined;
  for (const p of [...ahead, picking]) p?.catch(() => undefined);
  for (const p of ahead) await p;
  if (rebuilding) rebuilt.rebuilt(ref);
  // The groups folded before apply their answers first (see AppliedInOrder in postgres-store.ts).
  if (before) await before;
  await locks.get(tx);
  let taken: Taken[] = plain.map(() => ({ items: [], saturated: false }));
  if (picking) {
    const rows = (await picking).rows;
    const first = rows[0]!;
    const got = rows.filter((r) => r.id !== null);
    taken = handOut(tx, ref, plain, got);
    const short = got.length < want;
    // Looked no further than it should: the loop of svcq_claim_groups takes the rest.
    const more = !first.paused && short && (first.whole < first.looked || got.length < first.whole || first.unknown || first.again);
    if (more) {
      // What it took is passed over as taken, not written first: the calls folded after these
      // claims were sent behind the statement and read their rows as they were then. So are the
      // items those calls posted (in the table by now): they come after these claims.
      const rest = plain.map((c, i) => ({ ...c, max: c.max - taken[i]!.items.length }));
      const wanting = rest.filter((c) => c.max > 0);
      const restTaken = await takeByGroups(tx, ref, wanting, [...got.map((r) => r.id), ...postedAfter(tx, ref, group)]);
      let at = 0;
      rest.forEach((c, i) => {
        if (c.max > 0) taken[i]!.items.push(...restTaken[at++]!.items);
      });
    }
  }
  let at = 0;
  const out = asked.map((c) => (c.max > 0 ? taken[at++]!.items : []));
  await heldByPause(tx, ref, calls.map((c, i) => ({ input: c.input, short: out[i]!.length < asks[i]! })));
  return out;
}

/** Applies the claim rule to a row locked for it; null when the row is no longer claimable (read again under its lock). */
function claimRow(tx: Tx, ref: QueueRef, row: ItemRow, worker: string): Claimed | null {
  const loaded = tx.current(ref, row);
  if (!loaded) return null;
  const r = applyDue(tx, ref, loaded);
  if (!r || !rules.claimable(r, tx.now)) return null;
  const t = rules.claim(r, ref.config, worker, tx.now);
  tx.stage(ref, loaded, t);
  return claimedOf(t.record);
}

/**
 * A claim with criteria by groups, with a bounded look: per item it takes, the groups in the order
 * of the turns (or of their first claimable items, without fairness) that are below
 * groupMaxActive, at most {@link LOOK_GROUPS} of them, and in each the first {@link LOOK_ITEMS}
 * claimable items in claim order. Among the matching items there it takes the one decisions §8.5
 * names: the highest priority first; then, with fairness, the group served least recently (ties:
 * the group whose first claimable item at that priority comes first), its first matching item;
 * without, the first in claim order. The walk stops at the first group that cannot hold a better
 * item than the best found (the order of the group rows says so: a row's head is never later than
 * the group's first claimable item once the wakes are folded in). A matching item further back is
 * not found by this claim (see docs/postgresql-flow.md).
 */
async function takeMatchingByGroups(tx: Tx, ref: QueueRef, call: LimitedClaim, criteria: Record<string, unknown>): Promise<Taken> {
  const config = ref.config;
  const gmax = config.groupMaxActive;
  const fair = config.fairness === 'groups';
  await foldWakes(tx, ref);
  const leased = new Map<string, number>();
  if (gmax !== null) {
    const res = await tx.query<{ k: string; c: number }>(
      named('svcq_leased_groups', `SELECT coalesce(grp, '') AS k, count(*)::integer AS c FROM svcq_items WHERE queue = $1 AND status IN ('claimed', 'processing') GROUP BY 1`),
      [ref.key],
    );
    for (const r of res.rows) leased.set(r.k, r.c);
  }
  const items: Claimed[] = [];
  /** Groups at groupMaxActive passed over. */
  const full = new Set<string>();
  const takenIds: string[] = [];
  while (items.length < call.max && !call.input.signal?.aborted) {
    // A paused queue's claim finds no group (and is then told why by heldByPause).
    const groups = (
      await tx.query<{ grp: string; turn: string | number; head_p: number; head_ord: string | number }>(
        named(
          fair ? 'svcq_look_groups_fair' : 'svcq_look_groups_fifo',
          `SELECT grp, turn, head_p, head_ord FROM svcq_groups WHERE queue = $1 AND head_p IS NOT NULL AND ${NOT_PAUSED}
            ORDER BY (-head_p), ${fair ? 'turn, ' : ''}head_ord LIMIT $2`,
        ),
        [ref.key, LOOK_GROUPS + (gmax === null ? 0 : leased.size)],
      )
    ).rows;
    /** The best matching item found so far: its group, priority, claim order, and the group's turn and first claimable item at that priority. */
    let best: { grp: string; id: string; priority: number; ord: number; turn: number; head: number } | null = null;
    let looked = 0;
    for (const g of groups) {
      const turn = Number(g.turn);
      const headOrd = Number(g.head_ord);
      if (best) {
        // No item of this group or of any after it can come before the best one.
        if (g.head_p < best.priority) break;
        if (g.head_p === best.priority && (fair ? turn > best.turn || (turn === best.turn && headOrd > best.head) : headOrd > best.ord)) break;
      }
      if (gmax !== null && (leased.get(g.grp) ?? 0) >= gmax) {
        full.add(g.grp);
        continue;
      }
      if (++looked > LOOK_GROUPS) break;
      const page = await lookGroup(tx, ref, g.grp, takenIds);
      // The group's first matching item is its best: the highest priority, then the first in claim order.
      const m = page.find((p) => passes(p.body, criteria));
      if (!m) continue;
      const head = page.find((p) => p.priority === m.priority)!;
      const found = { grp: g.grp, id: m.id, priority: m.priority, ord: Number(m.ord), turn, head: Number(head.ord) };
      if (!best || better(found, best, fair)) best = found;
    }
    if (!best) break;
    const rows = (
      await tx.query<ItemRow>(
        named('svcq_lock_group_items', `SELECT ${COLUMNS} FROM svcq_items WHERE queue = $1 AND id = ANY($2::text[]) AND (status = 'pending') IS TRUE AND available_at = 0 ORDER BY (-priority), ord FOR UPDATE SKIP LOCKED`),
        [ref.key, [best.id]],
      )
    ).rows;
    const got = rows.length > 0 ? claimRow(tx, ref, rows[0]!, call.input.worker) : null;
    // Held by another transaction (or no longer claimable): this claim leaves it.
    takenIds.push(best.id);
    if (!got) continue;
    // One turn of the queue, stamped on the group with fairness; its head row is put right by the next pick.
    await tx.query(
      named('svcq_turn_group', `UPDATE svcq_groups SET turn = CASE WHEN $3 THEN nextval('svcq_turns') ELSE turn END WHERE queue = $1 AND grp = $2`),
      [ref.key, best.grp, fair],
    );
    leased.set(best.grp, (leased.get(best.grp) ?? 0) + 1);
    items.push(got);
  }
  // Held by groupMaxActive only when a group at the limit holds a matching item.
  let saturated = false;
  if (items.length < call.max) {
    for (const grp of full) {
      const page = await lookGroup(tx, ref, grp, takenIds);
      if (page.some((p) => passes(p.body, criteria))) {
        saturated = true;
        break;
      }
    }
  }
  return { items, saturated };
}

/** Whether a matching item found by a claim by groups comes before another (decisions §8.5). */
function better(a: { priority: number; ord: number; turn: number; head: number }, b: { priority: number; ord: number; turn: number; head: number }, fair: boolean): boolean {
  if (a.priority !== b.priority) return a.priority > b.priority;
  if (!fair) return a.ord < b.ord;
  // A group never served (turn 0) before every other; then the first claimable item at that priority.
  return a.turn !== b.turn ? a.turn < b.turn : a.head < b.head;
}

/** The first {@link LOOK_ITEMS} claimable items of a group in claim order, without those taken. */
async function lookGroup(tx: Tx, ref: QueueRef, grp: string, taken: string[]): Promise<Array<{ id: string; priority: number; ord: string | number; body: string }>> {
  return (
    await tx.query<{ id: string; priority: number; ord: string | number; body: string }>(
      named(
        'svcq_look_group',
        `SELECT id, priority, ord, body FROM svcq_items WHERE queue = $1 AND coalesce(grp, '') = $2 AND status = 'pending' AND available_at = 0 AND id <> ALL ($3::text[])
          ORDER BY (-priority), ord LIMIT $4`,
      ),
      [ref.key, grp, taken, LOOK_ITEMS],
    )
  ).rows;
}

/**
 * The transaction's last writes for flow control, sent just before its COMMIT (after its items'
 * writes were taken): the leases its claims noted in the rate window (at the transaction's final
 * time, so that no lease is noted earlier than its `claimed` event), and the wakes of the groups
 * its changes made an item claimable in. Nothing is sent for a transaction that touched no
 * limited queue.
 */
export function finishLimits(tx: Tx): Promise<unknown> | undefined {
  const sends: Array<Promise<unknown>> = [];
  const held = limiters.get(tx);
  if (held) {
    const keys: string[] = [];
    const slots: number[] = [];
    const counts: string[] = [];
    const counted: number[] = [];
    for (const [key, lim] of held) {
      if (!lim.rated || lim.noted === 0 || lim.rateMax === 0) continue;
      counts.push(key);
      counted.push(lim.rateMax === 0 ? 0 : lim.rateCount + lim.noted);
      if (lim.rateMax === 0) continue;
      for (let k = Math.max(lim.rateCount, lim.rateCount + lim.noted - lim.rateMax); k < lim.rateCount + lim.noted; k++) {
        keys.push(key);
        slots.push(k % lim.rateMax);
      }
    }
    if (counts.length > 0)
      sends.push(
      tx.query(
        named(
          'svcq_note_leases',
          `WITH noted AS (
             INSERT INTO svcq_rate_slots (queue, slot, at) SELECT k, s, $3 FROM unnest($1::text[], $2::integer[]) AS u(k, s)
             ON CONFLICT (queue, slot) DO UPDATE SET at = EXCLUDED.at
           )
           UPDATE svcq_limiters AS l SET rate_count = u.c, last_at = greatest(l.last_at, $3) FROM unnest($4::text[], $5::bigint[]) AS u(k, c) WHERE l.queue = u.k`,
        'generic',
        ),
        [keys, slots, tx.now, counts, counted],
      ),
    );
  }
  const waking = writeWakes(tx);
  if (waking) sends.push(waking);
  if (sends.length === 0) return undefined;
  return Promise.all(sends);
}

/**
 * Appends the wakes of the groups in which the transaction's changes since its last wakes made an
 * item claimable: before its COMMIT, and before a claim by groups in it, so that the claim sees
 * the items posted or re-queued earlier in the same transaction. Undefined when there are none.
 */
function writeWakes(tx: Tx): Promise<unknown> | undefined {
  const from = woken.get(tx) ?? 0;
  woken.set(tx, tx.changes.length);
  const best = new Map<string, { key: string; grp: string; priority: number; ord: number }>();
  for (let i = from; i < tx.changes.length; i++) {
    const c = tx.changes[i]!;
    if (c.purged || c.record.status !== 'pending' || c.record.availableAt !== 0 || !grouped(c.ref.config)) continue;
    const grp = groupKey(c.record.group);
    const slot = `${c.ref.key}\n${grp}`;
    const was = best.get(slot);
    if (!was || c.record.priority > was.priority || (c.record.priority === was.priority && c.record.ord < was.ord)) best.set(slot, { key: c.ref.key, grp, priority: c.record.priority, ord: c.record.ord });
  }
  if (best.size === 0) return undefined;
  const w = [...best.values()];
  return tx.query(named('svcq_group_wakes', 'INSERT INTO svcq_group_wakes (queue, grp, priority, ord) SELECT * FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[])'), [
        w.map((x) => x.key),
        w.map((x) => x.grp),
        w.map((x) => x.priority),
        w.map((x) => x.ord),
      ]);
}

/**
 * decisions §8.5 groupsWaiting for a queue by groups: the groups holding a claimable item, read
 * from the items themselves (what the group rows know may be out of date: items made claimable
 * before the queue had groups, or cancelled since the last claim). A skip scan of
 * svcq_items_groups: one index probe per group counted, whatever the number of items, and none
 * for the idle groups (they have no entry in that index).
 */
export const GROUPS_WAITING_SQL = `WITH RECURSIVE g AS (
    (SELECT coalesce(i.grp, '') AS k FROM svcq_items i WHERE i.queue = $1 AND i.status = 'pending' AND i.available_at = 0 ORDER BY coalesce(i.grp, '') LIMIT 1)
  UNION ALL
    SELECT (SELECT coalesce(i.grp, '') FROM svcq_items i WHERE i.queue = $1 AND i.status = 'pending' AND i.available_at = 0 AND coalesce(i.grp, '') > g.k
             ORDER BY coalesce(i.grp, '') LIMIT 1)
      FROM g WHERE g.k IS NOT NULL
  )
  SELECT count(k)::integer AS n FROM g`;
