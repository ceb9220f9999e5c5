import type { TaskEventKind } from '../engine/item.js';

/** The task events whose rates operators see (decisions §5.1 `rates`). */
export const RATE_KINDS = ['posted', 'claimed', 'finished', 'failed'] as const;
export type RateKind = (typeof RATE_KINDS)[number];
export type QueueRates = Record<RateKind, number>;

/** Seconds the rates are averaged over (decisions §5.1: per second over the last 60 s). */
export const RATE_WINDOW_SECONDS = 60;

const KIND_INDEX: Partial<Record<TaskEventKind, number>> = { posted: 0, claimed: 1, finished: 2, failed: 3 };
const KINDS = RATE_KINDS.length;

/**
 * One queue's events in a ring of one-second slots. A slot is stamped with the second it counts;
 * a slot whose stamp is older than the window counts nothing, so an idle queue needs no sweeping
 * and a read never walks more than the window.
 */
class Ring {
  /** `counts[slot * KINDS + kind]` */
  readonly counts: Uint32Array;
  /** The whole second (since the epoch) each slot counts; -1 for a slot never used. */
  readonly stamps: Float64Array;

  constructor(readonly slots: number) {
    this.counts = new Uint32Array(slots * KINDS);
    this.stamps = new Float64Array(slots).fill(-1);
  }

  add(second: number, kind: number): void {
    const slot = second % this.slots;
    if (this.stamps[slot] !== second) {
      this.stamps[slot] = second;
      this.counts.fill(0, slot * KINDS, slot * KINDS + KINDS);
    }
    this.counts[slot * KINDS + kind]! += 1;
  }

  /** Events of each kind in the seconds `now - slots + 1` through `now`. */
  sums(now: number): number[] {
    const sums = new Array<number>(KINDS).fill(0);
    for (let slot = 0; slot < this.slots; slot++) {
      const stamp = this.stamps[slot]!;
      if (stamp < 0 || stamp > now || stamp <= now - this.slots) continue;
      for (let k = 0; k < KINDS; k++) sums[k]! += this.counts[slot * KINDS + k]!;
    }
    return sums;
  }
}

/**
 * Per-queue event rates over the last minute, fed by the store's durable task events
 * (`StoreObserver.events`). The current second counts as it fills: the window is the current
 * second and the 59 before it, divided by 60.
 */
export class EventRates {
  private readonly rings = new Map<string, Ring>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly windowSeconds = RATE_WINDOW_SECONDS,
  ) {}

  /** Counts the events of queue `key` (`<host>/<name>`) that rates are kept for; others are ignored. */
  record(key: string, kinds: readonly TaskEventKind[]): void {
    let ring: Ring | undefined;
    const second = Math.floor(this.now() / 1000);
    for (const kind of kinds) {
      const index = KIND_INDEX[kind];
      if (index === undefined) continue;
      ring ??= this.ringOf(key);
      ring.add(second, index);
    }
  }

  /** Events per second of each kind over the window; zeros for a queue that has had none. */
  rates(key: string): QueueRates {
    const ring = this.rings.get(key);
    const sums = ring ? ring.sums(Math.floor(this.now() / 1000)) : new Array<number>(KINDS).fill(0);
    const out = {} as QueueRates;
    RATE_KINDS.forEach((kind, i) => (out[kind] = sums[i]! / this.windowSeconds));
    return out;
  }

  private ringOf(key: string): Ring {
    let ring = this.rings.get(key);
    if (!ring) this.rings.set(key, (ring = new Ring(this.windowSeconds)));
    return ring;
  }
}
