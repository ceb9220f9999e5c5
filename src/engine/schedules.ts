import { createHash } from 'node:crypto';
import { Cron } from 'croner';
import type { PostOptions } from './rules.js';

/**
 * Recurring items (decisions §8.3) as pure functions, the time passed in: when a schedule's
 * occurrences fall, and which of them a tick posts. Every store applies these, and records a
 * schedule's {@link ScheduleState} in the same atomic step as the items it posts.
 *
 * Cron expressions are read by croner (no parser of our own): it knows IANA zones and their
 * daylight-saving changes. croner runs a fixed time that a change skips at the first time after
 * the gap, as Vixie cron does; decisions §8.3 says such a time does not occur that day, so an
 * occurrence whose local time does not match the expression is dropped here, and so is the second
 * pass of a local time that a change repeats (croner runs a wildcard time on both passes).
 */

/** A schedule as its queue's rules hold it, every default applied. */
export interface ScheduleSpec {
  name: string;
  /** 5-field cron expression, or null for `every`. */
  cron: string | null;
  /** Seconds, or null for `cron`. */
  every: number | null;
  timezone: string;
  /** The item posted at each occurrence, as JSON text. */
  item: string;
  priority: number;
  group: string | null;
  missed: 'skip' | 'once' | 'all';
  overlap: 'allow' | 'skip';
  /** The definition's identity (sha256 of its fields): a changed schedule starts afresh. */
  hash: string;
}

/** What a store keeps of one schedule, written with the items it posts. */
export interface ScheduleState {
  /** {@link ScheduleSpec.hash} of the schedule this state is of. */
  hash: string;
  /** Every occurrence at or before this time has passed: posted, or skipped by `missed`/`overlap`. */
  passedAt: number;
  /** The last occurrence that posted an item, and that item; null when none did yet. */
  lastAt: number | null;
  lastId: string | null;
}

/** What a schedule's definition looks like in a queue definition (decisions §8.3). */
export interface ScheduleDefinition {
  cron?: string;
  every?: number;
  timezone?: string;
  item?: Record<string, unknown>;
  priority?: number;
  group?: string;
  missed?: 'skip' | 'once' | 'all';
  overlap?: 'allow' | 'skip';
}

/** At most this many missed occurrences are posted by `missed: "all"`: the latest ones. */
export const MAX_CATCH_UP = 100;
/** At most this many schedules per queue. */
export const MAX_SCHEDULES = 100;
/**
 * An occurrence older than this when a tick sees it counts as missed (no server could post it):
 * a tick that is merely late (a busy node, a slow database) still posts each occurrence.
 */
export const MISSED_AFTER_MS = 5000;

export const SCHEDULE_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** A schedule definition with its defaults applied, and its identity. */
export function resolveSchedule(name: string, def: ScheduleDefinition): ScheduleSpec {
  const spec: Omit<ScheduleSpec, 'hash'> = {
    name,
    cron: def.cron ?? null,
    every: def.every ?? null,
    timezone: def.timezone ?? 'UTC',
    item: JSON.stringify(def.item ?? {}),
    priority: def.priority ?? 0,
    group: def.group ?? null,
    missed: def.missed ?? 'once',
    overlap: def.overlap ?? 'allow',
  };
  const hash = createHash('sha256')
    .update(JSON.stringify([spec.cron, spec.every, spec.timezone, spec.item, spec.priority, spec.group, spec.missed, spec.overlap]))
    .digest('hex')
    .slice(0, 32);
  return { ...spec, hash };
}

/** A problem with a cron expression or a zone, in words, or null when croner reads it. */
export function cronProblem(cron: string | undefined, timezone: string | undefined): { field: 'cron' | 'timezone'; message: string } | null {
  if (timezone !== undefined && !knownZone(timezone)) return { field: 'timezone', message: `"${timezone}" is not an IANA time zone name` };
  if (cron === undefined) return null;
  if (cron.trim().split(/\s+/).length !== 5) return { field: 'cron', message: 'must have 5 fields: minute hour day-of-month month day-of-week' };
  try {
    cronOf(cron, timezone ?? 'UTC');
  } catch (err) {
    return { field: 'cron', message: (err as Error).message.replace(/^CronPattern: /, '') };
  }
  return null;
}

function knownZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

const crons = new Map<string, Cron>();

/** One parsed expression per expression and zone, kept (the definitions name few). */
function cronOf(pattern: string, timezone: string): Cron {
  const key = `${timezone} ${pattern}`;
  let c = crons.get(key);
  if (!c) {
    c = new Cron(pattern, { timezone, mode: '5-part', paused: true });
    crons.set(key, c);
  }
  return c;
}

const offsetFormats = new Map<string, Intl.DateTimeFormat>();

/** The zone's offset from UTC at `t`, in minutes. */
function offsetAt(timezone: string, t: number): number {
  let f = offsetFormats.get(timezone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone: timezone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    offsetFormats.set(timezone, f);
  }
  const p: Record<string, number> = {};
  for (const part of f.formatToParts(new Date(t))) if (part.type !== 'literal') p[part.type] = Number(part.value);
  const wall = Date.UTC(p.year!, p.month! - 1, p.day!, p.hour!, p.minute!, p.second!);
  return Math.round((wall - Math.floor(t / 1000) * 1000) / 60_000);
}

/** A cron occurrence that decisions §8.3 keeps: its local time matches, and it is not the second pass of a repeated local time. */
function keeps(c: Cron, timezone: string, t: number): boolean {
  if (!c.match(new Date(t))) return false;
  // A change that turned the clocks back within the last day: the same local time an offset's difference earlier?
  const now = offsetAt(timezone, t);
  const before = offsetAt(timezone, t - 86_400_000);
  if (before <= now) return true;
  // The first pass of this local time was `before - now` minutes earlier, under the older offset.
  return offsetAt(timezone, t - (before - now) * 60_000) !== before;
}

/** The schedule's first occurrence after `after` (ms), or null when it has none. */
export function nextOccurrence(spec: Pick<ScheduleSpec, 'cron' | 'every' | 'timezone'>, after: number): number | null {
  if (spec.every !== null) {
    const step = spec.every * 1000;
    return (Math.floor(after / step) + 1) * step;
  }
  const c = cronOf(spec.cron!, spec.timezone);
  let t = after;
  for (let n = 0; n < 1000; n++) {
    const d = c.nextRun(new Date(t));
    if (!d) return null;
    const at = d.getTime();
    if (keeps(c, spec.timezone, at)) return at;
    t = at;
  }
  return null;
}

/**
 * The occurrences in (`after`, `through`], oldest first: all of them, or the latest `limit` when
 * there are more; `more` says there were.
 */
export function occurrencesBetween(spec: Pick<ScheduleSpec, 'cron' | 'every' | 'timezone'>, after: number, through: number, limit: number): { at: number[]; more: boolean } {
  if (through <= after) return { at: [], more: false };
  if (spec.every !== null) {
    const step = spec.every * 1000;
    const last = Math.floor(through / step) * step;
    const first = (Math.floor(after / step) + 1) * step;
    if (last < first) return { at: [], more: false };
    const count = (last - first) / step + 1;
    const from = count > limit ? last - (limit - 1) * step : first;
    const at: number[] = [];
    for (let t = from; t <= last; t += step) at.push(t);
    return { at, more: count > limit };
  }
  const c = cronOf(spec.cron!, spec.timezone);
  // Backwards from `through`: a long outage costs the occurrences kept, not every one it held.
  const at: number[] = [];
  let ref = through + 1;
  for (let n = 0; n < limit * 10 + 10 && at.length <= limit; n++) {
    const prev = c.previousRuns(1, new Date(ref))[0];
    if (!prev || prev.getTime() <= after) break;
    ref = prev.getTime();
    if (keeps(c, spec.timezone, ref)) at.push(ref);
  }
  const more = at.length > limit;
  return { at: at.slice(0, limit).reverse(), more };
}

/** What one tick does to one schedule: its state afterwards, and the occurrences to post an item for. */
export interface SchedulePlan {
  /** The state to record, or null when nothing changed. */
  state: ScheduleState | null;
  /** Occurrences to post, oldest first (each becomes one item; the last posted is `lastAt`). */
  post: number[];
}

/**
 * decisions §8.3, one tick at `now`. A schedule the store has no state for, or whose definition
 * changed, starts now: its next occurrence is the first after `now` (or after what had passed
 * already, if that is later). Otherwise the occurrences
 * in (`passedAt`, `now`] pass: those at most {@link MISSED_AFTER_MS} old are posted; older ones
 * were missed, and `missed` says how many of them are posted (none, the latest, each of the latest
 * {@link MAX_CATCH_UP}). `previousLive`: the item of the last posted occurrence is not terminal
 * (then `overlap: "skip"` posts nothing, but the occurrences still pass); with `overlap: "skip"`
 * a tick posts one item at most.
 */
export function planSchedule(spec: ScheduleSpec, state: ScheduleState | undefined, now: number, previousLive: boolean): SchedulePlan {
  if (!state || state.hash !== spec.hash) {
    // What has passed never moves back (a node whose clock is behind, or whose definition is
    // older, may be the one that sees the change): an occurrence posted stays passed.
    return { state: { hash: spec.hash, passedAt: state ? Math.max(state.passedAt, now) : now, lastAt: state?.lastAt ?? null, lastId: state?.lastId ?? null }, post: [] };
  }
  if (now <= state.passedAt) return { state: null, post: [] };
  const { at } = occurrencesBetween(spec, state.passedAt, now, MAX_CATCH_UP);
  if (at.length === 0) return { state: null, post: [] };
  const passed = at[at.length - 1]!;
  const onTime = at.filter((t) => now - t <= MISSED_AFTER_MS);
  const missed = at.filter((t) => now - t > MISSED_AFTER_MS);
  let post = spec.missed === 'all' ? at : spec.missed === 'once' && missed.length > 0 ? [missed[missed.length - 1]!, ...onTime] : onTime;
  if (spec.overlap === 'skip') post = previousLive ? [] : post.slice(-1);
  return { state: { hash: state.hash, passedAt: passed, lastAt: state.lastAt, lastId: state.lastId }, post };
}

/** A schedule as `GET /api/v2/queues/<host>/<name>` shows it. */
export interface ScheduleView {
  name: string;
  /** The next occurrence (ms), or null. */
  next: number | null;
  /** The last occurrence that posted an item, and that item's id; null when none did. */
  last: number | null;
  lastId: string | null;
}

/** The view of one schedule: its next occurrence after what has passed (or after now, for one that has not started). */
export function scheduleView(spec: ScheduleSpec, state: ScheduleState | undefined, now: number): ScheduleView {
  const from = state && state.hash === spec.hash ? Math.min(state.passedAt, now) : now;
  const same = state !== undefined;
  return { name: spec.name, next: nextOccurrence(spec, from), last: same ? state.lastAt : null, lastId: same ? state.lastId : null };
}

/** The `postedBy` of the items a schedule posts. */
export function postedBy(name: string): string {
  return `schedule:${name}`;
}

/** The post options (decisions §8.1) of the items a schedule posts: none for priority 0 and no group, as a plain post. */
export function scheduledOptions(spec: Pick<ScheduleSpec, 'priority' | 'group'>): PostOptions | undefined {
  if (spec.priority === 0 && spec.group === null) return undefined;
  return spec.group === null ? { priority: spec.priority } : { priority: spec.priority, group: spec.group };
}
