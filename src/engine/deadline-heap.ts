/**
 * A binary min-heap of (deadline, value). Entries are not removed one by one: whoever pops one
 * checks that it still applies (lazy deletion), which keeps every change to an item O(log n) at
 * most; `retain` drops many at once.
 */
export class DeadlineHeap<T> {
  private readonly at: number[] = [];
  private readonly values: T[] = [];

  get size(): number {
    return this.at.length;
  }

  push(deadline: number, value: T): void {
    const at = this.at;
    const values = this.values;
    let i = at.length;
    at.push(deadline);
    values.push(value);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (at[parent]! <= deadline) break;
      at[i] = at[parent]!;
      values[i] = values[parent]!;
      i = parent;
    }
    at[i] = deadline;
    values[i] = value;
  }

  /** Keeps only the entries whose value passes `keep`, in heap order again (O(n)). */
  retain(keep: (value: T) => boolean): void {
    let n = 0;
    for (let i = 0; i < this.at.length; i++) {
      if (!keep(this.values[i]!)) continue;
      this.at[n] = this.at[i]!;
      this.values[n] = this.values[i]!;
      n++;
    }
    this.at.length = n;
    this.values.length = n;
    for (let i = (n >> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  private siftDown(from: number): void {
    const at = this.at;
    const values = this.values;
    const n = at.length;
    const deadline = at[from]!;
    const value = values[from]!;
    let i = from;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && at[right]! < at[left]! ? right : left;
      if (at[child]! >= deadline) break;
      at[i] = at[child]!;
      values[i] = values[child]!;
      i = child;
    }
    at[i] = deadline;
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

  /** Removes and returns the earliest value if its deadline is at or before `now`. */
  popDue(now: number): T | undefined {
    if (this.at.length === 0 || this.at[0]! > now) return undefined;
    const top = this.values[0]!;
    const lastAt = this.at.pop()!;
    const lastValue = this.values.pop()!;
    if (this.at.length > 0) {
      this.at[0] = lastAt;
      this.values[0] = lastValue;
      this.siftDown(0);
    }
    return top;
  }
}
