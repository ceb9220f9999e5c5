/**
 * A binary min-heap of (deadline, value). Entries are not removed one by one: whoever pops one
 * checks that it still applies (lazy deletion), which keeps every change to an item O(log n) at
 * most; `retain` drops many at once.
 *
 * Entries with the same deadline come out in the order `tieOf` gives them (the order they were
 * pushed, unless told): a queue's items that reach one deadline together (two posted in the same
 * millisecond, timing out together) are changed in claim order, as the reference model changes
 * them, and not in an order the heap's shape happens to give (which would, say, copy them to a
 * dead-letter queue in another order on every run).
 */
export class DeadlineHeap<T> {
  private readonly at: number[] = [];
  /** Each entry's tie-break between equal deadlines. */
  private readonly order: number[] = [];
  private readonly values: T[] = [];
  private pushed = 0;

  constructor(private readonly tieOf?: (value: T) => number) {}

  get size(): number {
    return this.at.length;
  }

  push(deadline: number, value: T): void {
    const at = this.at;
    const order = this.order;
    const values = this.values;
    const seq = this.tieOf ? this.tieOf(value) : this.pushed++;
    let i = at.length;
    at.push(deadline);
    order.push(seq);
    values.push(value);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (at[parent]! < deadline || (at[parent] === deadline && order[parent]! <= seq)) break;
      at[i] = at[parent]!;
      order[i] = order[parent]!;
      values[i] = values[parent]!;
      i = parent;
    }
    at[i] = deadline;
    order[i] = seq;
    values[i] = value;
  }

  /** Keeps only the entries whose value passes `keep`, in heap order again (O(n)). */
  retain(keep: (value: T) => boolean): void {
    let n = 0;
    for (let i = 0; i < this.at.length; i++) {
      if (!keep(this.values[i]!)) continue;
      this.at[n] = this.at[i]!;
      this.order[n] = this.order[i]!;
      this.values[n] = this.values[i]!;
      n++;
    }
    this.at.length = n;
    this.order.length = n;
    this.values.length = n;
    for (let i = (n >> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  /** Whether entry `i` comes out before entry `j`. */
  private before(i: number, j: number): boolean {
    const a = this.at[i]!;
    const b = this.at[j]!;
    return a < b || (a === b && this.order[i]! < this.order[j]!);
  }

  private siftDown(from: number): void {
    const at = this.at;
    const order = this.order;
    const values = this.values;
    const n = at.length;
    const deadline = at[from]!;
    const seq = order[from]!;
    const value = values[from]!;
    let i = from;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.before(right, left) ? right : left;
      const c = at[child]!;
      if (c > deadline || (c === deadline && order[child]! > seq)) break;
      at[i] = c;
      order[i] = order[child]!;
      values[i] = values[child]!;
      i = child;
    }
    at[i] = deadline;
    order[i] = seq;
    values[i] = value;
  }

  /** Every entry, in no particular order (stale ones included). */
  *entries(): Iterable<[deadline: number, value: T]> {
    for (let i = 0; i < this.at.length; i++) yield [this.at[i]!, this.values[i]!];
  }

  /** The earliest deadline, or undefined when empty. */
  peek(): number | undefined {
    return this.at[0];
  }

  /** The tie-break of the entry {@link peek} names. */
  peekTie(): number | undefined {
    return this.order[0];
  }

  /** Removes and returns the earliest value if its deadline is at or before `now` (of equal deadlines, the first pushed). */
  popDue(now: number): T | undefined {
    if (this.at.length === 0 || this.at[0]! > now) return undefined;
    const top = this.values[0]!;
    const lastAt = this.at.pop()!;
    const lastOrder = this.order.pop()!;
    const lastValue = this.values.pop()!;
    if (this.at.length > 0) {
      this.at[0] = lastAt;
      this.order[0] = lastOrder;
      this.values[0] = lastValue;
      this.siftDown(0);
    }
    return top;
  }
}
