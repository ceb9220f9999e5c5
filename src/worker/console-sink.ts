import { FAILURE_REPORT_EVERY_MS, FailureReport } from '../client/backoff.js';
import { jsonErrorLine } from '../cli/json-error.js';
import { tally, type WorkerEvent, type WorkerSink } from './events.js';

export interface ConsoleSinkOptions {
  /** Where JSON event lines go (stdout), or null for none. */
  json: NodeJS.WritableStream | null;
  /** Redraw a live status line on `stderr` (only when it is a terminal). */
  statusLine: boolean;
  stderr: NodeJS.WritableStream;
  /**
   * `--json` was asked for: an error reaches stderr as `{ "error": sentence }` (as every command's
   * does), and retries and reconnections only the JSON lines on stdout. Without it (JSON lines only
   * because stdout is not a terminal), stderr gets them as sentences.
   */
  jsonErrors?: boolean;
  queue: string;
  /** Test hook: the clock used for rates. */
  now?: () => number;
}

const RATE_WINDOW_MS = 10_000;
const REDRAW_MS = 100;
/** While calls to the server keep failing, say so at most this often (the first failure at once). */
export const RETRY_REPORT_EVERY_MS = FAILURE_REPORT_EVERY_MS;

/**
 * What a person or a program sees of `svcq work`: JSON event lines on stdout for programs, a
 * status line redrawn in place on a terminal, CMD's stderr passed through with the item id in
 * front of each line, and the events worth a person's attention as plain lines on stderr.
 */
export class ConsoleSink implements WorkerSink {
  private done = 0;
  private failed = 0;
  private cancelled = 0;
  private ids: readonly string[] = [];
  private readonly completions: number[] = [];
  private readonly started: number;
  /** The status line is on screen (the cursor stands at its end). */
  private drawn = false;
  /** The worker has stopped: the status line is not drawn again. */
  private closed = false;
  private redrawTimer?: NodeJS.Timeout;
  private ticker?: NodeJS.Timeout;
  private readonly now: () => number;
  /** The run of failing calls to the server, as far as the lines said. */
  private readonly connection: FailureReport;

  constructor(private readonly options: ConsoleSinkOptions) {
    this.now = options.now ?? Date.now;
    this.started = this.now();
    this.connection = new FailureReport(RETRY_REPORT_EVERY_MS, this.now);
    // The rate decays while nothing finishes, so the line is redrawn even when nothing happens.
    if (options.statusLine) this.ticker = setInterval(() => this.redraw(), 1000).unref();
  }

  event(e: WorkerEvent): void {
    const count = tally(e);
    if (count) {
      this[count]++;
      this.completions.push(this.now());
    }
    // The final line is the last thing on the terminal: no status line after it.
    if (e.event === 'stopped') this.stopDrawing();
    const line = e.event === 'retry' || e.event === 'reconnected' ? this.connectionLine(e) : humanLine(e);
    if (this.options.json) {
      this.options.json.write(`${JSON.stringify({ ...e, ts: this.now() })}\n`);
      // Errors and a server that cannot be reached also reach stderr, so a worker whose stdout
      // goes to a file still says why it stopped, or what it keeps retrying.
      if (this.options.jsonErrors) {
        if (e.event === 'error' && line) this.printAbove(jsonErrorLine(line));
      } else if (line && (e.event === 'error' || e.event === 'retry' || e.event === 'reconnected')) this.printAbove(line);
    } else if (line) this.printAbove(line);
    this.scheduleRedraw();
  }

  /**
   * What a person reads of failing calls to the server: the first failure at once, then a
   * reminder at most every {@link RETRY_REPORT_EVERY_MS}, and a word when it answers again.
   */
  private connectionLine(e: Extract<WorkerEvent, { event: 'retry' | 'reconnected' }>): string | undefined {
    if (e.event === 'reconnected') {
      return this.connection.answered() === undefined ? undefined : `the server answers again, after ${seconds(e.afterMs)} of failures`;
    }
    // "cannot reach URL (why)" says it all; a server that answered with an error is named by the call.
    const what = e.message.startsWith('cannot reach ') ? e.message : `${e.what}${e.id ? ` for ${e.id}` : ''} failed: ${e.message}`;
    const now = this.now();
    switch (this.connection.failed(now)) {
      case 'first':
        return `${what}; retrying`;
      case 'again':
        return `${what}; still retrying after ${seconds(this.connection.failingFor(now))}`;
      default:
        return undefined;
    }
  }

  stderrLine(id: string, line: string): void {
    this.printAbove(`[${id}] ${line}`);
  }

  running(ids: readonly string[]): void {
    this.ids = ids;
    this.scheduleRedraw();
  }

  close(): void {
    this.stopDrawing();
  }

  /** Stops redrawing and takes the status line off the screen, leaving the cursor at a line start. */
  private stopDrawing(): void {
    this.closed = true;
    clearInterval(this.ticker);
    clearTimeout(this.redrawTimer);
    this.redrawTimer = undefined;
    if (this.drawn) this.options.stderr.write('\r\x1b[K');
    this.drawn = false;
  }

  /** The status line's text. */
  statusText(): string {
    const now = this.now();
    while (this.completions.length && this.completions[0]! < now - RATE_WINDOW_MS) this.completions.shift();
    const span = Math.max(1, Math.min(RATE_WINDOW_MS, now - this.started)) / 1000;
    const rate = this.completions.length / span;
    const shown = this.ids.slice(0, 3).join(' ') + (this.ids.length > 3 ? ` +${this.ids.length - 3}` : '');
    const cancelled = this.cancelled ? ` · cancelled ${this.cancelled}` : '';
    return `${this.options.queue}: running ${this.ids.length} · done ${this.done} · failed ${this.failed}${cancelled} · ${rate.toFixed(1)}/s${shown ? ` · ${shown}` : ''}`;
  }

  /**
   * Prints a line above the status line: clears the status line, prints, and draws it again below,
   * in one write, so the status line is never left off the screen.
   */
  private printAbove(line: string): void {
    const { stderr, statusLine } = this.options;
    const clear = statusLine && this.drawn ? '\r\x1b[K' : '';
    const status = statusLine && !this.closed ? this.statusLineText() : '';
    stderr.write(`${clear}${line}\n${status}`);
    this.drawn = status !== '';
  }

  private scheduleRedraw(): void {
    if (!this.options.statusLine || this.closed || this.redrawTimer) return;
    this.redrawTimer = setTimeout(() => {
      this.redrawTimer = undefined;
      this.redraw();
    }, REDRAW_MS);
    this.redrawTimer.unref();
  }

  private redraw(): void {
    if (!this.options.statusLine || this.closed) return;
    this.options.stderr.write(`\r\x1b[K${this.statusLineText()}`);
    this.drawn = true;
  }

  /** The status text cut to the terminal's width, so it never wraps onto a second line. */
  private statusLineText(): string {
    const columns = (this.options.stderr as NodeJS.WriteStream).columns || 100;
    return this.statusText().slice(0, Math.max(20, columns - 1));
  }
}

/** The events a person should read as a line of their own; the rest only move the status line. */
function humanLine(e: WorkerEvent): string | undefined {
  switch (e.event) {
    case 'failed': {
      const why = e.timedOut ? 'timed out' : e.signal ? `killed by ${e.signal}` : `exit code ${e.exitCode}`;
      const next = !e.accepted ? `item already ${e.status}` : e.status === 'pending' ? 'will be retried' : `item ${e.status}`;
      return `${e.id} failed (${why}, attempt ${e.attempts}); ${next}`;
    }
    case 'cancelled':
      return `${e.id} is ${e.status}: its command was stopped`;
    case 'error':
      return `${e.id ? `${e.id}: ` : ''}${e.message}`;
    case 'warning':
      return `${e.id ? `${e.id}: ` : ''}${e.message}`;
    case 'empty':
      return 'nothing to do: the queue is empty';
    case 'stopping':
      return e.force ? `stopping ${e.running} running command(s)…` : `finishing ${e.running} running command(s), claiming nothing new (signal again to stop them)…`;
    case 'stopped':
      return `stopped: ${e.done} done, ${e.failed} failed, ${e.cancelled} cancelled`;
    default:
      return undefined;
  }
}

function seconds(ms: number): string {
  return `${Math.round(ms / 1000)} s`;
}
