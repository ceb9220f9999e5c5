import { randomBytes } from 'node:crypto';
import { CLAIM_TOPIC_PREFIX, InProcessNotifier, ITEM_TOPIC_PREFIX, type Notifier } from '../../waiting/notifier.js';
import { PgListener } from './pg-listener.js';

export interface PgNotifierOptions {
  /** The database every node shares (the store's URL). */
  url: string;
  /** The LISTEN/NOTIFY channel (default `svcq`). */
  channel?: string;
  /** A topic is sent to other nodes at most once per this many milliseconds (default 20); the last notify of a burst is always sent. */
  minIntervalMs?: number;
  /** How often a node tells the others what it waits for (default 2000 ms); they forget it after 2.5 times that. */
  heartbeatMs?: number;
  /** How long a statement on the listening connection may wait for an answer before the connection is cut and opened again (default 10 s). */
  answerTimeoutMs?: number;
  /** After how long without a word the listening connection is checked with a `SELECT 1` (default 5000 ms). */
  pingMs?: number;
  warn?: (line: string) => void;
}

/**
 * Bytes of topics packed into one notification, below PostgreSQL's 8000-byte payload limit: the
 * topics of a statement go out in as few notifications as fit (one per finished item would cost
 * every node a message per job).
 */
const PAYLOAD_BYTES = 7000;

/** Statements that send notifications start at most this often, in milliseconds: topics of the time between go together. */
const SEND_EVERY_MS = 5;

/** Topics held for other nodes while the connection is down, at most. */
const MAX_HELD = 10_000;

/** After a node's waiting on something new is announced, its own waiters look again this long after (ms): see {@link PgNotifier}. */
const RECHECK_AFTER_MS = [250, 1000];

/**
 * The notifier of a node that shares its database with others (decisions §6.1: "a claim held on
 * one node is answered within milliseconds of a matching post on another"). Listeners of this
 * process are woken at once, as by {@link InProcessNotifier}; the topic is also sent to every
 * other node with `NOTIFY` and wakes their listeners when it arrives.
 *
 * - One dedicated connection LISTENs (a pooled connection cannot: it is shared, and a pooler in
 *   transaction mode would drop the LISTEN). It also sends: the topics of a few milliseconds
 *   (SEND_EVERY_MS) go out in one statement, packed into as few notifications as fit.
 * - NOTIFY takes a database-wide lock at commit, so a topic is sent at most once per
 *   `minIntervalMs`; a notify inside that window is sent at its end, never dropped.
 * - A node ignores its own notifications (it woke its listeners already).
 * - Only to nodes that wait: a node tells the others which queues it has waiting claims on and
 *   which queues it has fetches waiting on items of (`want claim KEY`, `want item KEY`), when it
 *   starts waiting on one and every `heartbeatMs` while it does (and a while after). A topic
 *   that no other node waits on is not sent: a queue whose workers never have to wait, or a
 *   single node, costs no notifications at all (each is a commit). A node that starts, or listens
 *   again after its connection failed, asks the others to say what they wait on (`who-waits`)
 *   and sends everything for the second their answers take. A
 *   node that just began to wait may miss a change made before the others heard of it, so its
 *   own waiters look again RECHECK_AFTER_MS after the announcement.
 * - At least once, not exactly once: a listener may be woken when nothing changed for it (a long
 *   poll then asks the store and waits again). When the connection fails, it reconnects by
 *   itself with a growing delay; once listening again it wakes every local listener, since
 *   notifications sent meanwhile are lost. Notifications that cannot be sent are dropped with a
 *   warning: the waiting requests they would have woken end at their deadline.
 */
export class PgNotifier implements Notifier {
  private readonly local = new InProcessNotifier();
  private readonly channel: string;
  private readonly minInterval: number;
  private readonly warn: (line: string) => void;
  /** Prefixes this node's payloads, so that it can tell its own notifications apart. */
  private readonly node = randomBytes(6).toString('hex');
  private readonly listener: PgListener;
  private closed = false;
  /** Subscribers by topic (to wake them all after a reconnection). */
  private readonly topics = new Map<string, number>();
  /** When each topic was last sent, oldest first (a topic sent again moves to the end). */
  private readonly sentAt = new Map<string, number>();
  /** Topics to send in the next statement. */
  private outbox = new Set<string>();
  private flushScheduled = false;
  private lastSend = 0;
  /** A NOTIFY statement is under way: topics wait in the outbox for it (one statement at a time on the connection). */
  private sending = false;
  /** Topics waiting for the end of their interval, with the timer that sends them. */
  private readonly delayed = new Map<string, NodeJS.Timeout>();
  /** What this node waits on (`claim KEY`, `item KEY`): its subscribers, and until when it still says so after the last went. */
  private readonly waitingOn = new Map<string, { subscribers: number; until: number }>();
  /** What other nodes wait on, until when (their last heartbeat, plus slack). */
  private readonly othersWait = new Map<string, number>();
  /** Until then every topic is sent: the others' heartbeats have not all been heard yet. */
  private sendAllUntil: number;
  private readonly heartbeatMs: number;
  /** How long a node's `want` holds after it was last said (2.5 heartbeats: one lost is not forgotten). */
  private readonly forgetAfterMs: number;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly rechecks = new Set<NodeJS.Timeout>();

  constructor(private readonly options: PgNotifierOptions) {
    this.channel = options.channel ?? 'svcq';
    this.minInterval = options.minIntervalMs ?? 20;
    this.warn = options.warn ?? (() => undefined);
    this.heartbeatMs = options.heartbeatMs ?? 2000;
    this.forgetAfterMs = 2.5 * this.heartbeatMs;
    this.sendAllUntil = Infinity;
    this.heartbeat = setInterval(() => this.announceWaiting(), this.heartbeatMs);
    this.heartbeat.unref();
    this.listener = new PgListener({
      url: options.url,
      channel: this.channel,
      name: 'the connection that listens for other nodes',
      answerTimeoutMs: options.answerTimeoutMs,
      pingMs: options.pingMs,
      warn: this.warn,
      onNotify: (payload) => {
        const space = payload.indexOf(' ');
        if (space === -1 || payload.slice(0, space) === this.node) return;
        const now = Date.now();
        for (const topic of payload.slice(space + 1).split('\n')) {
          if (topic.startsWith(WANT)) this.othersWait.set(topic.slice(WANT.length), now + this.forgetAfterMs);
          else if (topic === WHO_WAITS) this.announceWaiting();
          else this.local.notify(topic);
        }
      },
      onResumed: () => {
        this.warn('listening for other nodes again');
        // What the others said meanwhile was lost too: everything goes out until they have said it again.
        this.askWhoWaits();
        this.announceWaiting();
        // Whatever other nodes announced meanwhile was lost: every local listener looks again.
        for (const topic of this.topics.keys()) this.local.notify(topic);
        this.flush();
      },
    });
  }

  /** Connects and LISTENs; resolves once notifications from other nodes arrive. */
  async start(): Promise<void> {
    await this.listener.start();
    this.askWhoWaits();
    this.flush();
  }

  /** Asks every other node to say at once what it waits on; until the answers are in, everything is sent. */
  private askWhoWaits(): void {
    this.sendAllUntil = Date.now() + ANSWERS_WITHIN_MS;
    this.enqueue(WHO_WAITS);
  }

  notify(topic: string): void {
    this.local.notify(topic);
    if (this.closed) return;
    const waitedOn = waitedOnBy(topic);
    if (waitedOn !== null && !this.othersWaitOn(waitedOn)) return;
    if (this.delayed.has(topic) || this.outbox.has(topic)) return;
    const now = Date.now();
    const last = this.sentAt.get(topic);
    if (last !== undefined && now - last < this.minInterval) {
      const timer = setTimeout(() => {
        this.delayed.delete(topic);
        this.enqueue(topic);
      }, this.minInterval - (now - last));
      timer.unref();
      this.delayed.set(topic, timer);
      return;
    }
    this.enqueue(topic);
  }

  subscribe(topic: string, listener: () => void): () => void {
    this.topics.set(topic, (this.topics.get(topic) ?? 0) + 1);
    const unsubscribe = this.local.subscribe(topic, listener);
    const waitedOn = waitedOnBy(topic);
    if (waitedOn !== null) this.startWaiting(waitedOn);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      unsubscribe();
      if (waitedOn !== null) this.stopWaiting(waitedOn);
      const n = (this.topics.get(topic) ?? 1) - 1;
      if (n === 0) this.topics.delete(topic);
      else this.topics.set(topic, n);
    };
  }

  /** Whether another node waits on `what` (or may: its heartbeats have not been heard yet). */
  private othersWaitOn(what: string): boolean {
    const now = Date.now();
    if (now < this.sendAllUntil) return true;
    const until = this.othersWait.get(what);
    if (until === undefined) return false;
    if (until > now) return true;
    this.othersWait.delete(what);
    return false;
  }

  private startWaiting(what: string): void {
    const now = Date.now();
    const w = this.waitingOn.get(what);
    if (w) {
      w.subscribers++;
      // Still announced (a subscriber went a moment ago): the others know.
      if (w.subscribers > 1 || w.until > now) return;
      w.until = Infinity;
    } else this.waitingOn.set(what, { subscribers: 1, until: Infinity });
    if (this.closed) return;
    this.enqueue(`${WANT}${what}`);
    // A change another node made before it heard this is not sent here: look again a little later.
    for (const after of RECHECK_AFTER_MS) {
      const timer = setTimeout(() => {
        this.rechecks.delete(timer);
        this.recheck(what);
      }, after);
      timer.unref();
      this.rechecks.add(timer);
    }
  }

  private stopWaiting(what: string): void {
    const w = this.waitingOn.get(what);
    if (!w) return;
    w.subscribers--;
    // Said for a while longer: waiting starts and stops all the time on a busy queue.
    if (w.subscribers === 0) w.until = Date.now() + this.forgetAfterMs;
  }

  /** Wakes this node's listeners of what it waits on, as a notification from another node would. */
  private recheck(what: string): void {
    if (what.startsWith(CLAIM_TOPIC_PREFIX)) {
      if (this.topics.has(what)) this.local.notify(what);
      return;
    }
    // `item KEY`: every item topic of the queue begins with it and a space.
    const prefix = `${what} `;
    for (const topic of this.topics.keys()) if (topic.startsWith(prefix)) this.local.notify(topic);
  }

  /** The heartbeat: tells the others everything this node waits on (and forgets what it no longer does). */
  private announceWaiting(): void {
    if (this.closed) return;
    const now = Date.now();
    for (const [what, w] of this.waitingOn) {
      if (w.subscribers > 0 || w.until > now) this.enqueue(`${WANT}${what}`);
      else this.waitingOn.delete(what);
    }
  }

  /** Stops listening and sending; local listeners keep working. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const timer of this.rechecks) clearTimeout(timer);
    this.rechecks.clear();
    for (const timer of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    await this.listener.close();
  }

  private enqueue(topic: string): void {
    this.outbox.add(topic);
    if (this.flushScheduled || this.sending) return;
    this.flushScheduled = true;
    const wait = this.lastSend + SEND_EVERY_MS - Date.now();
    const go = (): void => {
      this.flushScheduled = false;
      this.flush();
    };
    if (wait > 0) setTimeout(go, wait).unref();
    else setImmediate(go);
  }

  private flush(): void {
    const topics = [...this.outbox];
    this.outbox = new Set();
    if (topics.length === 0) return;
    const now = Date.now();
    for (const topic of topics) {
      this.sentAt.delete(topic);
      this.sentAt.set(topic, now);
    }
    // Forget topics sent longer ago than the interval (item topics are many and each used once).
    for (const [topic, at] of this.sentAt) {
      if (now - at < this.minInterval) break;
      this.sentAt.delete(topic);
    }
    if (this.closed) return;
    if (!this.listener.listening) {
      // Not listening (so not sending) at the moment: sent once the connection is back, up to a bound.
      if (topics.length <= MAX_HELD) for (const topic of topics) this.outbox.add(topic);
      else this.warn(`${topics.length} notification(s) for other nodes were dropped while the database could not be reached`);
      return;
    }
    this.sending = true;
    this.lastSend = now;
    this.listener
      .run('SELECT pg_notify($1, $2 || t) FROM unnest($3::text[]) AS t', [this.channel, `${this.node} `, pack(topics)])
      .then((sent) => {
        // The connection went down just then: held for it like the others.
        if (!sent) for (const topic of topics) this.outbox.add(topic);
      })
      .catch((err: Error) => this.warn(`${topics.length} notification(s) could not be sent to other nodes: ${err.message}`))
      .finally(() => {
        this.sending = false;
        if (this.outbox.size > 0) this.flush();
      });
  }
}

/** Announces, as a topic, what a node waits on. */
const WANT = 'want ';
/** Asks, as a topic, every node to announce what it waits on now (a node that starts or listens again). */
const WHO_WAITS = 'who-waits';
/** How long a node that asked sends everything, waiting for the answers (ms). */
const ANSWERS_WITHIN_MS = 1000;

/** What a subscriber of a topic waits on, as nodes tell each other: `claim KEY` for a queue's claims, `item KEY` for items of a queue; null for anything else. */
function waitedOnBy(topic: string): string | null {
  if (topic.startsWith(CLAIM_TOPIC_PREFIX)) return topic;
  if (topic.startsWith(ITEM_TOPIC_PREFIX)) {
    const end = topic.indexOf(' ', ITEM_TOPIC_PREFIX.length);
    return end === -1 ? null : topic.slice(0, end);
  }
  return null;
}

/** Topics joined by newlines (no topic holds one) into payloads of at most PAYLOAD_BYTES. */
function pack(topics: readonly string[]): string[] {
  const payloads: string[] = [];
  let current: string[] = [];
  let bytes = 0;
  for (const topic of topics) {
    const size = Buffer.byteLength(topic) + 1;
    if (current.length > 0 && bytes + size > PAYLOAD_BYTES) {
      payloads.push(current.join('\n'));
      current = [];
      bytes = 0;
    }
    current.push(topic);
    bytes += size;
  }
  if (current.length > 0) payloads.push(current.join('\n'));
  return payloads;
}
