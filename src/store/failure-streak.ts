/**
 * A run of failures of one recurring piece of work (a transaction, a poll), told once when it
 * starts and once when it ends, however many failures come between: a database that is away for
 * a minute gives two log lines, not thousands.
 */
export class FailureStreak {
  private failing = false;

  constructor(
    private readonly warn: (line: string) => void,
    /** The line told when the work succeeds again. */
    private readonly recovered: string,
  ) {}

  /** The work failed: `line` (built only then) is told if this starts a streak. */
  failed(line: () => string): void {
    if (this.failing) return;
    this.failing = true;
    this.warn(line());
  }

  /** The work succeeded: the recovery line is told if this ends a streak. */
  succeeded(): void {
    if (!this.failing) return;
    this.failing = false;
    this.warn(this.recovered);
  }
}
