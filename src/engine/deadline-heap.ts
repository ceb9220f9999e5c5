/**
 * A binary min-heap of (deadline, value). Entries are never removed early: whoever pops one checks
 * that it still applies (lazy deletion), which keeps every change to an item O(log n) at most.
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
    const n = this.at.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= n) break;
        const right = left + 1;
        const child = right < n && this.at[right]! < this.at[left]! ? right : left;
        if (this.at[child]! >= lastAt) break;
        this.at[i] = this.at[child]!;
        this.values[i] = this.values[child]!;
        i = child;
      }
      this.at[i] = lastAt;
      this.values[i] = lastValue;
    }
    return top;
  }
}
