import pg from 'pg';
import { ANSWER_TIMEOUT_MS, watch } from './pg-guard.js';

export interface PgListenerOptions {
  url: string;
  channel: string;
  /** Called for every notification on the channel (from any session, this process's included). */
  onNotify: (payload: string) => void;
  /** Called once listening again after the connection failed: notifications sent meanwhile were lost. */
  onResumed?: () => void;
  /** What the warnings call the connection (default: "the connection listening on CHANNEL"). */
  name?: string;
  /**
   * How long a statement on the connection (its LISTEN, a `run`) may wait for an answer before the
   * connection is cut and opened again (default 10 s).
   */
  answerTimeoutMs?: number;
  /**
   * After this many milliseconds without a word on the connection (a notification, an answer), a
   * `SELECT 1` is run on it, under the answer timeout: a connection that died without closing
   * (its database's host gone) is found and opened again even while it only listens. Default
   * 5000; 0 for never.
   */
  pingMs?: number;
  warn?: (line: string) => void;
}

/** See {@link PgListenerOptions.pingMs}. */
const PING_MS = 5000;

/** Reconnection delays after the connection fails, doubling up to the last. */
const RECONNECT_MS = [100, 200, 400, 800, 1600, 3200, 5000];

/**
 * One dedicated connection that LISTENs on a channel, reconnecting by itself with a growing delay
 * when it fails (a pooled connection cannot listen: it is shared, and a pooler in transaction
 * mode would drop the LISTEN). Delivery is best effort: notifications sent while it is down are
 * lost, so whoever uses it is told through `onResumed` when listening resumes. Used by the
 * definitions (which also poll) and by the long polls' notifier (which also sends on it).
 */
export class PgListener {
  private client: pg.Client | undefined;
  private connecting: Promise<void> | undefined;
  private closed = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly warn: (line: string) => void;
  /** When the connection last said something (performance.now()), and the statements under way on it. */
  private heardAt = 0;
  private running = 0;
  private pinger: NodeJS.Timeout | undefined;

  constructor(private readonly options: PgListenerOptions) {
    this.warn = options.warn ?? (() => undefined);
  }

  private get name(): string {
    return this.options.name ?? `the connection listening on ${this.options.channel}`;
  }

  /** Connects and LISTENs. A first connection that fails rejects; later failures reconnect. */
  start(): Promise<void> {
    const pingMs = this.options.pingMs ?? PING_MS;
    if (pingMs > 0 && !this.pinger) {
      this.pinger = setInterval(() => this.ping(pingMs), Math.max(10, pingMs / 2));
      this.pinger.unref();
    }
    return this.connect();
  }

  /** A `SELECT 1` on a connection that has said nothing for `pingMs` (see {@link PgListenerOptions.pingMs}). */
  private ping(pingMs: number): void {
    if (!this.client || this.running > 0 || performance.now() - this.heardAt < pingMs) return;
    this.run('SELECT 1', []).catch(() => undefined);
  }

  /**
   * Runs a statement on the listening connection (one statement at a time: the caller waits for
   * each). Resolves false, running nothing, while the connection is down. A statement left
   * without an answer for `answerTimeoutMs` (a database gone silent, a network that drops
   * packets) cuts the connection: it rejects, and the connection is opened again as after any
   * failure, rather than holding every later statement behind it until TCP gives up.
   */
  async run(text: string, values: unknown[]): Promise<boolean> {
    const client = this.client;
    if (!client) return false;
    this.running++;
    try {
      await this.answered(client, text, values);
      this.heardAt = performance.now();
    } finally {
      this.running--;
    }
    return true;
  }

  /** One statement on `client`, the connection cut if it goes unanswered for the answer timeout. */
  private async answered(client: pg.Client, text: string, values: unknown[] = []): Promise<void> {
    const watched = watch(client, this.answerTimeoutMs);
    try {
      await client.query(text, values);
    } finally {
      watched.stop();
    }
  }

  private get answerTimeoutMs(): number {
    return this.options.answerTimeoutMs ?? ANSWER_TIMEOUT_MS;
  }

  /** Whether the connection is up and listening. */
  get listening(): boolean {
    return this.client !== undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.pinger);
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private connect(): Promise<void> {
    if (this.connecting) return this.connecting;
    const attempt = (async () => {
      const client = new pg.Client({ connectionString: this.options.url, connectionTimeoutMillis: 5000, keepAlive: true });
      client.on('error', (err) => this.lost(client, err));
      client.on('end', () => this.lost(client, new Error('the connection ended')));
      client.on('notification', (msg) => {
        this.heardAt = performance.now();
        if (msg.channel === this.options.channel) this.options.onNotify(msg.payload ?? '');
      });
      try {
        await client.connect();
        await this.answered(client, `LISTEN ${pg.escapeIdentifier(this.options.channel)}`);
      } catch (err) {
        client.removeAllListeners('end');
        await client.end().catch(() => undefined);
        throw err;
      }
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.heardAt = performance.now();
      if (this.failures > 0) {
        this.failures = 0;
        this.options.onResumed?.();
      }
    })();
    this.connecting = attempt.finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private lost(client: pg.Client, err: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    if (this.closed) return;
    this.warn(`${this.name} failed (${err.message}); reconnecting`);
    this.reconnect();
  }

  private reconnect(): void {
    if (this.closed || this.timer) return;
    const delay = RECONNECT_MS[Math.min(this.failures, RECONNECT_MS.length - 1)]!;
    this.failures++;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.connect().catch((err: Error) => {
        this.warn(`${this.name} could not be opened yet (${err.message})`);
        this.reconnect();
      });
    }, delay);
    this.timer.unref();
  }
}
