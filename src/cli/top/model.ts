import type { QueueDetail, QueueEntry, QueueList } from '../../operators/answers.js';
import type { CoreTimes, Snapshot } from '../../tools/stats.js';
import { CLOCK_SLACK_MS } from '../view/queues.js';

/** Samples kept per queue for the sparkline: one per refresh, a minute at one refresh a second. */
export const HISTORY = 60;

/** What one refresh fetched. */
export interface Fetched {
  at: number;
  list: QueueList;
  /** The selected queue's detail; null when there is no queue (or it went away meanwhile). */
  detail: QueueDetail | null;
  /** The server's health; null when it could not be read this time. */
  health: Snapshot | null;
  /**
   * How far the server's clock is ahead of this machine's (ms; negative: behind), from the
   * health snapshot's time; 0 when they agree to within {@link CLOCK_SLACK_MS}; null when the
   * snapshot could not be read. Ages and lease ends are the server's times, shown against the
   * server's now.
   */
  clockOffsetMs: number | null;
}


/** The offset of the server's clock, from a snapshot's time (whole seconds) taken while a request was under way from `sentAt` to `answeredAt` (this machine's ms). */
export function clockOffset(serverSeconds: number, sentAt: number, answeredAt: number): number {
  // The snapshot was taken somewhere in [sentAt, answeredAt]; its second ran up to a second past ts.
  const server = serverSeconds * 1000 + 500;
  const local = (sentAt + answeredAt) / 2;
  const offset = server - local;
  return Math.abs(offset) < CLOCK_SLACK_MS + (answeredAt - sentAt) / 2 ? 0 : Math.round(offset);
}

/** Everything the screen shows, carried from one refresh to the next. */
export interface TopState {
  fetched: Fetched | null;
  /** The selected queue's `<host>/<name>`, or null before the first answer. */
  selected: string | null;
  /** Per queue: items done (finished + failed) per second between successive refreshes, oldest first. */
  throughput: Map<string, number[]>;
  /** Per queue: finished + failed at the previous refresh, to difference. */
  lastDone: Map<string, { done: number; at: number }>;
  /** CPU busy (0..1) between the last two health snapshots, null until there are two. */
  cpuBusy: number | null;
  /** The last error, shown until the next refresh succeeds. */
  error: string | null;
}

export function initialState(): TopState {
  return { fetched: null, selected: null, throughput: new Map(), lastDone: new Map(), cpuBusy: null, error: null };
}

export const keyOf = (q: { host: string; name: string }): string => `${q.host}/${q.name}`;

/**
 * The state after a refresh: throughput is the change in finished + failed since the previous
 * refresh, per second (never below 0: retention purges terminal items); CPU busy is taken between
 * the per-core cumulative times of two snapshots.
 */
export function advance(state: TopState, fetched: Fetched): TopState {
  const throughput = new Map<string, number[]>();
  const lastDone = new Map<string, { done: number; at: number }>();
  for (const q of fetched.list.queues) {
    const key = keyOf(q);
    const done = q.counts.finished + q.counts.failed;
    const before = state.lastDone.get(key);
    const series = [...(state.throughput.get(key) ?? [])];
    if (before && fetched.at > before.at) {
      series.push(Math.max(0, done - before.done) / ((fetched.at - before.at) / 1000));
      if (series.length > HISTORY) series.splice(0, series.length - HISTORY);
    }
    throughput.set(key, series);
    lastDone.set(key, { done, at: fetched.at });
  }
  const previous = state.fetched?.health;
  const cpuBusy = previous?.cpu && fetched.health?.cpu ? busyBetween(previous.cpu.cores, fetched.health.cpu.cores) ?? state.cpuBusy : state.cpuBusy;
  return { ...state, fetched, throughput, lastDone, cpuBusy, error: null, selected: selectedAfter(state.selected, fetched.list.queues, state.fetched?.list.queues) };
}

/**
 * Keeps the selection on the same queue while it exists. When it is gone (deleted meanwhile), the
 * queue that now stands where it stood in `before`, the list shown until now, is selected (the last
 * one when it stood at the end), so that the operator stays where they were; with nothing to go
 * by, the first queue.
 */
export function selectedAfter(selected: string | null, queues: readonly QueueEntry[], before: readonly QueueEntry[] = []): string | null {
  if (queues.length === 0) return null;
  if (selected === null) return keyOf(queues[0]!);
  if (queues.some((q) => keyOf(q) === selected)) return selected;
  const stood = before.findIndex((q) => keyOf(q) === selected);
  return keyOf(queues[Math.min(Math.max(0, stood), queues.length - 1)]!);
}

/** Moves the selection `by` rows (up is -1), staying within the list. */
export function move(state: TopState, by: number): TopState {
  const queues = state.fetched?.list.queues ?? [];
  if (queues.length === 0) return state;
  const at = Math.max(0, queues.findIndex((q) => keyOf(q) === state.selected));
  const next = Math.min(queues.length - 1, Math.max(0, at + by));
  return { ...state, selected: keyOf(queues[next]!) };
}

/** Busy share of all cores between two cumulative readings; null when no time passed (or a reboot). */
export function busyBetween(before: CoreTimes[], after: CoreTimes[]): number | null {
  if (before.length !== after.length) return null;
  let total = 0;
  let idle = 0;
  after.forEach((c, i) => {
    const b = before[i]!;
    total += c.user + c.nice + c.sys + c.idle + c.irq - (b.user + b.nice + b.sys + b.idle + b.irq);
    idle += c.idle - b.idle;
  });
  return total > 0 && idle >= 0 ? Math.min(1, Math.max(0, (total - idle) / total)) : null;
}

const BLOCKS = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/**
 * The last `span` values (a minute's worth of samples) as `width` block characters scaled to their
 * maximum: each character stands for an equal share of the span, the mean of its samples when
 * there are more samples than characters, a sample drawn wider when there are fewer. Blanks stand
 * for no sample yet.
 */
export function sparkline(values: readonly number[], width: number, span = width): string {
  const shown = values.slice(-span);
  // The window's samples, oldest first, with the part of the span before the first sample empty.
  const slots: Array<number | undefined> = [...Array<undefined>(span - shown.length).fill(undefined), ...shown];
  const max = Math.max(0, ...shown);
  let line = '';
  for (let c = 0; c < width; c++) {
    const from = Math.floor((c * span) / width);
    const bucket = slots.slice(from, Math.max(from + 1, Math.floor(((c + 1) * span) / width))).filter((v): v is number => v !== undefined);
    if (bucket.length === 0) {
      line += ' ';
      continue;
    }
    const v = bucket.reduce((sum, x) => sum + x, 0) / bucket.length;
    line += max <= 0 ? BLOCKS[0] : BLOCKS[Math.min(BLOCKS.length - 1, Math.round((v / max) * (BLOCKS.length - 1)))];
  }
  return line;
}
