import { isIP } from 'node:net';
import http from 'node:http';
import type { Manifest } from '../definitions/manifest.js';
import type { BulkAnswer, PauseAnswer } from '../operators/answers.js';
import { arrayElements, objectMembers } from '../json-text.js';
import { answerMismatch, type AnswerShape } from './answer-shapes.js';
import { PostCoalescer } from './coalesce.js';
import { work, type WorkHandler, type WorkOptions, type Working } from './work.js';
import { IDEMPOTENCY_KEY_RULE, isIdempotencyKey, type BatchAnswer, type ClaimAnswer, type ClaimManyAnswer, type ClaimRequest, type PostAnswer, type StatusAnswer, type SubmissionAnswer } from '../protocol.js';

export const CLIENT_API = 2;

/** How long a post waits for its answer (a batch twice as long) before it counts as a `timeout`. */
export const POST_TIMEOUT_MS = 60_000;

/** An item larger than this (bytes) is posted on its own: the server's default --max-body, so its refusal is the plain post's 413. */
const COALESCE_ALONE_CHARS = 1024 * 1024;

/** How long any other call waits for its answer, past the wait it asked the server for (a long poll). */
export const CALL_TIMEOUT_MS = 30_000;

export interface ClientOptions {
  /** Base URL of the server, e.g. http://127.0.0.1:8080 */
  url: string;
  /** Master token (management and tools) or user token (queues); none for public queue operations. */
  token?: string;
  /** Queue domain sent as the Host header for queue calls. */
  host?: string;
  /**
   * How long a call waits for its answer before it fails with code `timeout`, past any wait it
   * asked the server for (a claim's `wait`, an item's `waitSeconds`); 0 waits for ever. Default
   * {@link CALL_TIMEOUT_MS}, and {@link POST_TIMEOUT_MS} for a post (twice that for a batch).
   * A call's own `timeoutMs` overrides it, with the same meaning.
   */
  timeoutMs?: number;
  /** What the wall's sentence adds when no token was given, after "no token was given" (the command line names its flag). */
  tokenHint?: string;
  /** What the wall's sentence adds when a queue call was sent without `host`, after the host it went to (the command line names its flag). */
  hostHint?: string;
  /**
   * Posts made while an earlier one (of the same queue and options) is on its way go out together
   * as one batch, each call settling with its own item's answer (docs/client.md, "Posts that
   * coalesce"). Default true; false sends every post on its own.
   */
  coalesce?: boolean;
}

/** Options every call takes. */
export interface CallOptions {
  /** Abandons the call; it then fails with code `aborted` (see {@link SvcqClient.request} for when that is too late). */
  signal?: AbortSignal;
  /** Overrides the client's `timeoutMs` for this call (past any wait it asks for, as the client's). */
  timeoutMs?: number;
}

/**
 * A post's options (decisions §8.1, §9.2), sent as its query parameters; a batch's apply to each of its
 * items. The server checks them: a value out of range rejects the post (code `rejected`), naming it.
 */
export interface PostOptions extends CallOptions {
  /** Not claimable for this many seconds (0–31536000). Not with `at`. */
  delay?: number;
  /** Not claimable before this time, ms since the Unix epoch (a time already past: at once). Not with `delay`. */
  at?: number;
  /** −100…100, default 0: a claim takes the highest priority first. */
  priority?: number;
  /** 1–128 printable ASCII characters: the item's group. */
  group?: string;
  /** decisions §9.2: the URL the item's status record is POSTed to when it ends (the server must allow it: `--push-allow`). */
  callback?: string;
}

/** The query of a post with these options: empty without any. */
function postQuery(opts: PostOptions): string {
  const query: string[] = [];
  for (const name of ['delay', 'at', 'priority', 'group', 'callback'] as const) {
    const value = opts[name];
    if (value !== undefined) query.push(`${name}=${encodeURIComponent(String(value))}`);
  }
  return query.length === 0 ? '' : `?${query.join('&')}`;
}

/** An item, a result, an error or a progress record: an object (sent as JSON.stringify makes it), or its exact JSON text. */
export type JsonObjectOrText = string | Record<string, unknown>;

/**
 * What kind of failure a {@link ClientError} is, for callers that act on it (its message is for people):
 * - `invalid-url`: the server URL given is not one the client can use
 * - `unreachable`: no answer: the connection failed or broke
 * - `timeout`: the server was reached but said nothing within the time allowed
 * - `aborted`: the caller abandoned the request (its `signal`) before its answer began
 * - `invalid-argument`: the call was given something it cannot send (nothing was sent)
 * - `wall`: 404 not found: a wrong token, host or queue (the server never says which)
 * - `no-such-item`: the queue has no item with that id
 * - `no-such-queue`: an operators' call named a host and queue with no queue definition
 * - `rejected`: 4xx naming the fields the server refused
 * - `api-version`: 426, the server speaks another API version
 * - `http`: any other error status (see `status`)
 * - `gave-up`: retried until the time allowed for failures ran out
 * - `not-a-folder`: a local path that should be a folder is not one
 */
export type ClientErrorCode = 'invalid-url' | 'unreachable' | 'timeout' | 'aborted' | 'invalid-argument' | 'wall' | 'no-such-item' | 'no-such-queue' | 'rejected' | 'api-version' | 'http' | 'gave-up' | 'not-a-folder';

/** A failure a person can act on: `message` is the one sentence a command prints, `code` what a caller checks. */
export class ClientError extends Error {
  readonly status?: number;
  readonly body?: unknown;
  /** true for failures worth retrying: the server could not be reached, or answered 5xx */
  readonly transient: boolean;
  /**
   * For a request that got no answer: true when it had gone out whole before the connection failed
   * or the time ran out, so the server may have acted on it (a retry could apply it twice); false
   * when it never did (the server cannot have acted on it).
   */
  readonly sent: boolean;

  constructor(
    message: string,
    readonly code: ClientErrorCode,
    details: { status?: number; body?: unknown; transient?: boolean; sent?: boolean } = {},
  ) {
    super(message);
    this.name = 'ClientError';
    this.status = details.status;
    this.body = details.body;
    this.transient = details.transient ?? false;
    this.sent = details.sent ?? details.status !== undefined;
  }
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** Socket error codes in the words a person uses for them. */
const NETWORK_ERRORS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  ENOTFOUND: 'no such host',
  EAI_AGAIN: 'name lookup failed',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ETIMEDOUT: 'timed out',
  EPIPE: 'connection closed',
};

// No cap on sockets: a worker holds one per slot in a long-poll claim, and a heartbeat queued
// behind those would let its lease run out. An idle connection is closed after 4 s, well before
// a server (svcq's own keeps them 65 s) or a proxy in front of it would: a request is never sent
// into a connection the other end is closing, which would leave its fate unknown.
const agent = new http.Agent({ keepAlive: true, timeout: 4000 });

/** The text each parsed answer was read from (see {@link answerText}). */
const answerTexts = new WeakMap<object, string>();

/**
 * The JSON text an answer of this client was parsed from, exactly as the server sent it: an item,
 * a result or an error holds what its sender wrote, and `JSON.parse` rounds a number such as
 * 12345678901234567890 and reads `1.0` as `1`. Undefined for an object this client did not parse.
 */
export function answerText(answer: object): string | undefined {
  return answerTexts.get(answer);
}

/**
 * The HTTP client of svcq's API, the one every command uses (`import { SvcqClient } from
 * 'svcq/client'`; docs/client.md). It pins `/api/v2` for management and tools, sends the queue
 * domain as the Host header for queue calls, and turns the server's answers into results or into
 * a {@link ClientError} with a sentence a person can act on.
 */
export class SvcqClient {
  private readonly base: URL;
  private readonly coalescer = new PostCoalescer({
    one: (queue, query, text) => this.json('POST', `/${part(queue, 'the queue name')}${query}`, { body: text, shape: 'post', queueHost: true, ...this.limits({}, 0, POST_TIMEOUT_MS) }),
    many: (queue, query, texts) => this.json('POST', `/${part(queue, 'the queue name')}/batch${query}`, { body: `[${texts.join(',')}]`, shape: 'batch', queueHost: true, ...this.limits({}, 0, POST_TIMEOUT_MS) }),
    refused: (entry) => explain(400, entry, ''),
  });

  constructor(readonly options: ClientOptions) {
    try {
      this.base = new URL(options.url);
    } catch {
      throw new ClientError(`the server URL "${options.url}" is not a valid URL (expected e.g. http://127.0.0.1:8080)`, 'invalid-url');
    }
    if (this.base.protocol !== 'http:') throw new ClientError(`the server URL "${options.url}" is not http:// (the only scheme supported)`, 'invalid-url');
  }

  /**
   * Sends one request; resolves with whatever the server answered. Rejects only when it could not be reached.
   * `signal` abandons the request only until the answer begins: an answer already arriving (a claimed
   * item, say) is read to its end, since the server has acted on the request by then. A claim
   * abandoned a moment before that may still have leased an item nobody receives: it is handed
   * out again when its lease ends, and that attempt counts. `timeoutMs` (default: the client's) of
   * 0 waits for ever. `connectTimeoutMs` (default `timeoutMs`) bounds the setting up of a new
   * connection, before anything is sent: no wait asked of the server has begun then.
   */
  request(method: string, path: string, opts: { body?: string | Buffer; headers?: Record<string, string>; queueHost?: boolean; timeoutMs?: number; connectTimeoutMs?: number; signal?: AbortSignal } = {}): Promise<RawResponse> {
    const timeoutMs = opts.timeoutMs ?? this.options.timeoutMs ?? CALL_TIMEOUT_MS;
    const connectTimeoutMs = timeoutMs === 0 ? 0 : (opts.connectTimeoutMs ?? timeoutMs);
    const headers: Record<string, string> = { ...opts.headers };
    if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
    if (opts.queueHost && this.options.host) headers.host = this.options.host;
    if (opts.body !== undefined) {
      headers['content-type'] ??= 'application/json';
      headers['content-length'] = String(Buffer.byteLength(opts.body));
    }
    const { signal } = opts;
    return new Promise((resolve, reject) => {
      let why: 'timeout' | 'aborted' | undefined;
      // Set once the whole request was handed to the connection: from then on the server may act on it.
      let sent = false;
      const req = http.request(
        // A URL writes an IPv6 address in brackets ([::1]): passed on with them, it would be looked up as a name.
        { protocol: 'http:', hostname: this.base.hostname.replace(/^\[(.*)\]$/, '$1'), port: this.base.port || 80, method, path: `${this.base.pathname.replace(/\/$/, '')}${path}`, headers, agent },
        (res) => {
          signal?.removeEventListener('abort', onAbort);
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
          res.on('error', (err) => reject(this.unreachable(err, why, true)));
        },
      );
      const onAbort = (): void => {
        why = 'aborted';
        req.destroy(Object.assign(new Error('The operation was aborted'), { name: 'AbortError', code: 'ABORT_ERR' }));
      };
      if (timeoutMs > 0) {
        let connected = true;
        req.setTimeout(timeoutMs, () => {
          why = 'timeout';
          req.destroy(new Error(connected ? `no answer within ${duration(timeoutMs)}` : `no connection within ${duration(connectTimeoutMs)}`));
        });
        // Node starts that clock only once connected: until then a new connection would wait on the
        // agent's idle time (4 s), whatever the time allowed.
        req.once('socket', (socket) => {
          if (!socket.connecting) return;
          connected = false;
          socket.setTimeout(connectTimeoutMs);
          socket.once('connect', () => (connected = true));
        });
      }
      req.on('finish', () => (sent = true));
      req.on('error', (err) => {
        signal?.removeEventListener('abort', onAbort);
        reject(this.unreachable(err, why, sent));
      });
      req.end(opts.body);
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private unreachable(err: Error, why: 'timeout' | 'aborted' | undefined, sent: boolean): ClientError {
    // The caller's own choice, not a failure to retry.
    if (why === 'aborted') return new ClientError(`the request was abandoned before its answer began${sent ? ' (it had been sent: the server may have acted on it)' : ''}`, 'aborted', { sent });
    const code = (err as NodeJS.ErrnoException).code;
    const words = (code && NETWORK_ERRORS[code]) ?? code ?? err.message;
    return new ClientError(`cannot reach ${this.options.url} (${words})`, why ?? 'unreachable', { transient: true, sent });
  }

  /** Sends a request and parses a JSON answer, turning error statuses into ClientErrors. */
  async json<T>(method: string, path: string, opts: Parameters<SvcqClient['request']>[2] & { ok?: number[]; shape?: AnswerShape } = {}): Promise<T> {
    const res = await this.request(method, path, opts);
    return this.checked(this.parse<T>(res, opts.ok ?? [200], opts.queueHost), method, path, res.status, opts.shape);
  }

  /**
   * Every answer svcq gives is a JSON object, of the shape its endpoint gives (`shape`): anything
   * else came from some other server (a --url that names a web page, a proxy), and is refused here
   * rather than read as `undefined` further on.
   */
  private checked<T>(answer: T, method: string, path: string, status: number, shape?: AnswerShape): T {
    const notObject = typeof answer !== 'object' || answer === null || Array.isArray(answer);
    const mismatch = notObject ? 'gave no JSON object' : shape === undefined ? null : answerMismatch(shape, answer);
    if (mismatch === null) return answer;
    const what = `${method} ${path.split('?')[0]}${notObject ? ` ${mismatch}` : `: ${mismatch}`}`;
    throw new ClientError(`${this.options.url} did not answer as svcq does (${what}): is --url right?`, 'http', { status, body: answer });
  }

  /** The answer's JSON, or the {@link ClientError} its status means; `queueCall`: it was sent to a queue (with the Host header when `host` was given). */
  parse<T>(res: RawResponse, ok: number[] = [200], queueCall = false): T {
    let body: unknown;
    const text = res.body.toString('utf8');
    try {
      body = res.body.length ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    if (typeof body === 'object' && body !== null) answerTexts.set(body, text);
    if (ok.includes(res.status)) return body as T;
    throw explain(res.status, body, this.wallReasons(queueCall));
  }

  /**
   * What the wall's sentence adds: the likeliest causes the client can see. A queue call sent
   * without `host` to an address (127.0.0.1, localhost) went to a host no queue can belong to:
   * that comes first, since a public queue needs no token; then a missing token. A URL that names
   * a domain may well be the queue's own (its DNS name pointing at the server), so it adds nothing.
   */
  private wallReasons(queueCall: boolean): string {
    const { token, host, tokenHint, hostHint } = this.options;
    const reasons: string[] = [];
    const named = this.base.hostname.replace(/^\[|\]$/g, '');
    const address = isIP(named) !== 0 || named === 'localhost' || named.endsWith('.localhost');
    if (queueCall && !host && address) reasons.push(`no host was given, so the queue was looked for on ${this.base.hostname}${hostHint ? ` (${hostHint})` : ''}`);
    if (!token) reasons.push(reasons.length > 0 ? `no token was given either${tokenHint ? ` (${tokenHint})` : ''}` : `no token was given${tokenHint ? ` (${tokenHint})` : ''}`);
    return reasons.join('; ');
  }

  // --- management (master token) ---
  version(opts: CallOptions = {}): Promise<{ api: number }> {
    return this.json('GET', '/api/version', { shape: 'version', ...this.limits(opts) });
  }
  manifest(opts: CallOptions = {}): Promise<Manifest> {
    return this.json('GET', `/api/v${CLIENT_API}/manifest`, { shape: 'manifest', ...this.limits(opts) });
  }
  async putDefinition(path: string, bytes: Buffer, opts: CallOptions = {}): Promise<{ ok: true }> {
    return this.json('PUT', `/api/v${CLIENT_API}/def?path=${part(path, 'the definition path')}`, { body: bytes, shape: 'put', ...this.limits(opts) });
  }
  async deleteDefinition(path: string, opts: CallOptions = {}): Promise<{ deleted: boolean }> {
    return this.json('DELETE', `/api/v${CLIENT_API}/def?path=${part(path, 'the definition path')}`, { shape: 'deleted', ...this.limits(opts) });
  }

  /**
   * A call's signal and the time it may wait for its answer: its own `timeoutMs` or the client's,
   * else `fallbackMs`, past the `waitMs` it asked the server to hold it (0: for ever); for a
   * connection to be set up, that time without the wait.
   */
  private limits(opts: CallOptions, waitMs = 0, fallbackMs = CALL_TIMEOUT_MS): { signal?: AbortSignal; timeoutMs: number; connectTimeoutMs: number } {
    const limit = opts.timeoutMs ?? this.options.timeoutMs ?? fallbackMs;
    return { signal: opts.signal, timeoutMs: limit === 0 ? 0 : limit + Math.max(0, waitMs), connectTimeoutMs: limit };
  }

  // --- tools (master token) ---
  /** GET of a tools list or snapshot endpoint, e.g. `logs`, `stats`, `stats/now`, `tasks`. */
  tool<T>(endpoint: 'logs' | 'stats' | 'stats/now' | 'tasks', opts: CallOptions = {}): Promise<T> {
    return this.json('GET', `/api/v${CLIENT_API}/${endpoint}`, { shape: TOOL_SHAPES[endpoint], ...this.limits(opts) });
  }
  /** Raw bytes of a tools file endpoint from byte `from` on (Range `bytes=N-`). */
  async toolFile(endpoint: string, query: Record<string, string>, from = 0, opts: CallOptions = {}): Promise<Buffer> {
    const qs = new URLSearchParams(query).toString();
    const res = await this.request('GET', `/api/v${CLIENT_API}/${endpoint}?${qs}`, { headers: from > 0 ? { range: `bytes=${from}-` } : {}, ...this.limits(opts) });
    if (res.status === 200 || res.status === 206) return res.body;
    return this.parse<never>(res);
  }

  // --- operators (master token) ---
  /**
   * Pauses the queue `name` of `host` (decisions §8.4): until it is resumed it leases nothing,
   * while posts, fetches, submissions and deadlines go on; a pause of a paused queue changes
   * nothing. Resolves with `{ paused: true }` once the pause is durable; a pair with no queue
   * definition rejects with code `no-such-queue`.
   */
  pause(host: string, name: string, opts: CallOptions = {}): Promise<PauseAnswer> {
    return this.setPaused(host, name, 'pause', opts);
  }
  /** Resumes a paused queue (decisions §8.4): it leases again, and claims held on it look at once. Resolves with `{ paused: false }`. */
  resume(host: string, name: string, opts: CallOptions = {}): Promise<PauseAnswer> {
    return this.setPaused(host, name, 'resume', opts);
  }
  private setPaused(host: string, name: string, action: 'pause' | 'resume', opts: CallOptions): Promise<PauseAnswer> {
    return this.json('POST', `/api/v${CLIENT_API}/queues/${part(host, 'the host')}/${part(name, 'the queue name')}/${action}`, { shape: 'pause', ...this.limits(opts) });
  }

  /**
   * decisions §8.6 bulk actions, one request: `redrive` sends the queue's pending dead letters back
   * to the queues they came from (`{ moved, more }`); `retry` makes failed, timed-out or cancelled
   * items pending again in place (`{ retried, more }`); `cancel` cancels pending or leased items
   * (`{ cancelled, more }`). At most `max` items (1–100000; the server's default 1000), oldest
   * first; `status` (retry, cancel) picks the statuses. `more`: items are left that it would change.
   * A pair with no queue definition rejects with code `no-such-queue`, a bad `max` or `status` with
   * code `http` (status 400) naming it.
   */
  bulk(host: string, name: string, action: 'redrive', body?: { max?: number }, opts?: CallOptions): Promise<{ moved: number; more: boolean }>;
  bulk(host: string, name: string, action: 'retry', body?: { max?: number; status?: string[] }, opts?: CallOptions): Promise<{ retried: number; more: boolean }>;
  bulk(host: string, name: string, action: 'cancel', body?: { max?: number; status?: string[] }, opts?: CallOptions): Promise<{ cancelled: number; more: boolean }>;
  bulk(host: string, name: string, action: 'redrive' | 'retry' | 'cancel', body: { max?: number; status?: string[] } = {}, opts: CallOptions = {}): Promise<BulkAnswer> {
    return this.json('POST', `/api/v${CLIENT_API}/queues/${part(host, 'the host')}/${part(name, 'the queue name')}/${action}`, { body: JSON.stringify(body), shape: action, ...this.limits(opts) });
  }

  // --- queues (user token or public, Host header) ---
  /**
   * Posts one item. A server silent for {@link POST_TIMEOUT_MS} (unless the client or the call
   * sets `timeoutMs`) fails with code `timeout`, and the item may have been posted: repeat it with
   * the same `idempotencyKey` to be sure it is posted once. `opts` may carry the item's delay or
   * time, priority and group (decisions §8.1).
   *
   * Unless the client was made with `coalesce: false`, posts made while an earlier one of the same
   * queue and options is on its way go out together as one batch (see {@link PostCoalescer}); a
   * post with an idempotency key, its own `signal` or `timeoutMs`, or an item over 1 MiB goes on
   * its own, as it would without coalescing.
   */
  async post(queue: string, item: JsonObjectOrText, idempotencyKey?: string, opts: PostOptions = {}): Promise<PostAnswer> {
    if (this.options.coalesce !== false && idempotencyKey === undefined && opts.signal === undefined && opts.timeoutMs === undefined) {
      const text = jsonText(item, 'the item');
      // Checked here as the plain post would check them, so a bad name fails this call alone.
      part(queue, 'the queue name');
      if (text.length <= COALESCE_ALONE_CHARS || Buffer.byteLength(text) <= COALESCE_ALONE_CHARS) return this.coalescer.post(queue, postQuery(opts), text);
    }
    return this.json('POST', `/${part(queue, 'the queue name')}${postQuery(opts)}`, { body: jsonText(item, 'the item'), shape: 'post', queueHost: true, headers: idempotencyHeader(idempotencyKey), ...this.limits(opts, 0, POST_TIMEOUT_MS) });
  }
  /** An item's status record; with `waitSeconds` (up to 30), held until the item is terminal or the time is up. */
  async item(queue: string, id: string, waitSeconds = 0, opts: CallOptions = {}): Promise<StatusAnswer> {
    const wait = waitSeconds > 0 ? `?wait=${waitSeconds}` : '';
    return this.json('GET', `/${part(queue, 'the queue name')}/items/${part(id, 'the item id')}${wait}`, { shape: 'status', queueHost: true, ...this.limits(opts, waitSeconds * 1000) });
  }

  /**
   * `opts.signal` abandons a long-poll claim (a stopping worker); `opts.timeoutMs` bounds a silent
   * server (by default the client's, past the claim's `wait`). With `max` the answer lists the items
   * (decisions §3.8); with `done` or `opts.handIns` it also says what became of each hand-in, in
   * order (`done` first).
   */
  claim(queue: string, body: ClaimRequest & { max?: undefined }, opts?: ClaimOptions): Promise<ClaimAnswer>;
  claim(queue: string, body: ClaimRequest & { max: number }, opts?: ClaimOptions): Promise<ClaimManyAnswer>;
  claim(queue: string, body: ClaimRequest, opts?: ClaimOptions): Promise<ClaimAnswer | ClaimManyAnswer>;
  async claim(queue: string, body: ClaimRequest, opts: ClaimOptions = {}): Promise<ClaimAnswer | ClaimManyAnswer> {
    const res = await this.request('POST', `/${part(queue, 'the queue name')}/claim`, { body: claimBody(body, opts.handIns), queueHost: true, ...this.limits(opts, (body.wait ?? 0) * 1000) });
    const answer = this.checked(this.parse<ClaimAnswer | ClaimManyAnswer>(res, [200], true), 'POST', `/${queue}/claim`, res.status, 'claim');
    answer.clockOffsetMs = clockOffset(res.headers.date);
    const later = retryAfterMs(res.headers['retry-after']);
    if (later !== undefined) answer.retryAfterMs = later;
    // Each item also as the exact text the server sent (interface §2.1).
    const texts = claimedItemTexts(res.body.toString('utf8'));
    if ('items' in answer) answer.items.forEach((item, n) => (item.itemText = texts[n]));
    else if (!answer.empty) answer.itemText = texts[0];
    return answer;
  }
  /**
   * Posts up to 1,000 items in one request and one durable write (decisions §3.8); with
   * `idempotencyKey` K, item n carries the key `K:n`. One answer per item, in order: an item the
   * server refuses does not stop the others. The options of `opts` (delay or time, priority, group)
   * apply to each item (decisions §8.1).
   */
  async postBatch(queue: string, items: readonly JsonObjectOrText[], idempotencyKey?: string, opts: PostOptions = {}): Promise<BatchAnswer> {
    const texts = items.map((item, n) => jsonText(item, `item ${n}`));
    return this.json('POST', `/${part(queue, 'the queue name')}/batch${postQuery(opts)}`, { body: `[${texts.join(',')}]`, shape: 'batch', queueHost: true, headers: idempotencyHeader(idempotencyKey), ...this.limits(opts, 0, 2 * POST_TIMEOUT_MS) });
  }
  /**
   * Reports progress, or submits the result or the error of an item (`accepted: false` once it is
   * terminal). An error may carry the worker's wish (decisions §8.2): `retryIn` seconds before the
   * next attempt, or `final`: no further attempt.
   */
  async submit(queue: string, id: string, kind: 'progress' | 'result' | 'error', record: JsonObjectOrText, opts: SubmitOptions = {}): Promise<SubmissionAnswer> {
    const query = kind !== 'error' ? '' : opts.final ? '?final=true' : opts.retryIn !== undefined ? `?retryIn=${encodeURIComponent(String(opts.retryIn))}` : '';
    return this.json('POST', `/${part(queue, 'the queue name')}/items/${part(id, 'the item id')}/${kind}${query}`, { body: jsonText(record, `the ${kind}`), shape: 'submission', queueHost: true, ...this.limits(opts) });
  }
  /**
   * Runs `handler(item, job)` for each item of `queue`, `concurrency` at once, until stopped
   * (docs/client.md, "Working through a queue"): claims ahead up to `prefetch`, hands results and
   * errors in with the next claim, keeps leases alive while handlers run, and waits out a server
   * that is away. What the handler returns is the result, what it throws the error.
   */
  work<T = Record<string, unknown>>(queue: string, handler: WorkHandler<T>, options: WorkOptions = {}): Working {
    return work(this, queue, handler, options);
  }

  /**
   * Hands a leased item back (decisions §8.2): pending again, not claimable for `delay` seconds,
   * and the claim that leased it not counted. `accepted: false` when it was not leased.
   */
  async release(queue: string, id: string, opts: CallOptions & { delay?: number } = {}): Promise<SubmissionAnswer> {
    const delay = opts.delay !== undefined ? `?delay=${encodeURIComponent(String(opts.delay))}` : '';
    return this.json('POST', `/${part(queue, 'the queue name')}/items/${part(id, 'the item id')}/release${delay}`, { shape: 'submission', queueHost: true, ...this.limits(opts) });
  }
  async cancel(queue: string, id: string, opts: CallOptions = {}): Promise<SubmissionAnswer> {
    return this.json('POST', `/${part(queue, 'the queue name')}/items/${part(id, 'the item id')}/cancel`, { shape: 'submission', queueHost: true, ...this.limits(opts) });
  }
}

/** The shape of each tools list or snapshot answer. */
const TOOL_SHAPES = { logs: 'logs', stats: 'stats', 'stats/now': 'snapshot', tasks: 'tasks' } as const satisfies Record<string, AnswerShape>;

/** Text to send as a JSON body: given as text, as it is; an object, as JSON.stringify makes it. */
function jsonText(value: JsonObjectOrText, what: string): string {
  if (typeof value === 'string') return value;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ClientError(`${what} must be a JSON object or its text`, 'invalid-argument');
  return JSON.stringify(value);
}

/**
 * A path or query part, percent-encoded. A string holding a lone UTF-16 surrogate has no UTF-8
 * form, so no URL can carry it: refused as an argument, like any other the server would refuse.
 */
function part(value: string, what: string): string {
  try {
    return encodeURIComponent(value);
  } catch {
    throw new ClientError(`${what} ${JSON.stringify(value)} holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair), which no URL can carry`, 'invalid-argument');
  }
}

/** The Idempotency-Key header, checked as the server checks it (decisions §3.5: 1–200 printable characters). */
function idempotencyHeader(key: string | undefined): Record<string, string> {
  if (key === undefined) return {};
  if (!isIdempotencyKey(key)) throw new ClientError(`an idempotency key ${IDEMPOTENCY_KEY_RULE}`, 'invalid-argument');
  return { 'idempotency-key': key };
}

/**
 * A result or error handed in with a claim (decisions §3.8) as the exact JSON object text to
 * submit: spliced into the request as it is, as the result and error endpoints take a body.
 */
export interface RawHandIn {
  id: string;
  kind: 'result' | 'error';
  record: string;
  /** An error's wish (decisions §8.2): retried not before this many seconds. */
  retryIn?: number;
  /** An error's wish (decisions §8.2): no further attempt. */
  final?: boolean;
}

/** An error submission's options: the worker's wish for this failure (decisions §8.2; one of the two). */
export interface SubmitOptions extends CallOptions {
  /** Retry not before this many seconds (0–31536000), in place of the queue's computed delay. */
  retryIn?: number;
  /** No further attempt: the item fails at once. */
  final?: boolean;
}

/** `signal` and `timeoutMs` as for every call; `handIns`: results and errors to hand in with the claim as exact texts, after any in its `done`. */
export interface ClaimOptions extends CallOptions {
  handIns?: readonly RawHandIn[];
}

/** A claim request's text; hand-ins given raw go in its `done` as they are, after those of `body.done`. */
function claimBody(body: ClaimRequest, handIns?: readonly RawHandIn[]): string {
  if (!handIns || handIns.length === 0) return JSON.stringify(body);
  const done = [...(body.done ?? []).map((d) => JSON.stringify(d)), ...handIns.map((h) => `{"id":${JSON.stringify(h.id)},"${h.kind}":${h.record}${h.retryIn !== undefined ? `,"retryIn":${JSON.stringify(h.retryIn)}` : ''}${h.final ? ',"final":true' : ''}}`)].join(',');
  const head = JSON.stringify({ ...body, done: undefined });
  return head === '{}' ? `{"done":[${done}]}` : `${head.slice(0, -1)},"done":[${done}]}`;
}

/**
 * The exact texts of the items in a claim answer (valid JSON, already parsed once), in order: the
 * top-level `item` of a single claim, or the `item` of each entry of `items` (decisions §3.8).
 * Only those positions count: an item may hold members named `item` itself.
 */
export function claimedItemTexts(text: string): Array<string | undefined> {
  const start = text.indexOf('{');
  if (start === -1) return [];
  const top = objectMembers(text, start);
  const one = top.get('item');
  if (one) return [text.slice(one.start, one.end)];
  const items = top.get('items');
  if (!items || text[items.start] !== '[') return [];
  return arrayElements(text, items.start).map((el) => {
    const item = text[el.start] === '{' ? objectMembers(text, el.start).get('item') : undefined;
    return item ? text.slice(item.start, item.end) : undefined;
  });
}

/**
 * A `Retry-After` header in ms: delay-seconds as svcq sends it, or an HTTP date (a proxy's), from
 * now; undefined when absent or unreadable.
 */
export function retryAfterMs(header: string | undefined, now = Date.now()): number | undefined {
  if (header === undefined) return undefined;
  if (/^\d+$/.test(header.trim())) return Number(header.trim()) * 1000;
  const at = Date.parse(header);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * How far the server's clock (its `Date` header, whole seconds) is ahead of this machine's, in ms;
 * 0 when within the 2 s the header's resolution and the trip can account for.
 */
export function clockOffset(date: string | undefined, now = Date.now()): number {
  const at = date === undefined ? NaN : Date.parse(date);
  if (Number.isNaN(at)) return 0;
  // The header drops the milliseconds: the server's clock read somewhere in [at, at + 1000).
  const offset = at + 500 - now;
  return Math.abs(offset) > 2000 ? offset : 0;
}

/** The wall's sentence (decisions §1.2). */
export const WALL = 'not found (wrong token, host or queue?)';
/** The same when the request carried no token at all, with the likeliest cause after it. */
export const WALL_WITHOUT_TOKEN = `${WALL}: no token was given`;

/** The sentence for an error status (decisions §1.2); `wallReasons`: what the wall's sentence adds after a colon (nothing when empty). */
function explain(status: number, body: unknown, wallReasons: string): ClientError {
  if (status === 426) return new ClientError(`the server speaks another API version (it says: ${describe(body)}); this client speaks /api/v${CLIENT_API}`, 'api-version', { status, body });
  const record = (typeof body === 'object' && body !== null ? body : {}) as { error?: unknown; errors?: Array<{ path?: string; message?: string }> };
  if (status === 404 && record.error === 'not found') return new ClientError(wallReasons ? `${WALL}: ${wallReasons}` : WALL, 'wall', { status, body });
  if (status === 404 && record.error === 'no such item') return new ClientError('no such item', 'no-such-item', { status, body });
  if (status === 404 && record.error === 'no such queue') return new ClientError('no such queue', 'no-such-queue', { status, body });
  if (Array.isArray(record.errors)) {
    const parts = record.errors.map((e) => (e.path && e.path !== '/' ? `${e.path}: ${e.message}` : String(e.message)));
    return new ClientError(`rejected: ${parts.join('; ')}`, 'rejected', { status, body });
  }
  if (typeof record.error === 'string') return new ClientError(record.error, 'http', { status, body, transient: status >= 500 });
  return new ClientError(`the server answered HTTP ${status}`, 'http', { status, body, transient: status >= 500 });
}

/** A time allowed, as a person reads it: `300 ms`, `30 s`. */
function duration(ms: number): string {
  return ms < 1000 ? `${ms} ms` : `${Math.round(ms / 1000)} s`;
}

function describe(body: unknown): string {
  return typeof body === 'object' && body !== null && 'error' in body ? String((body as { error: unknown }).error) : JSON.stringify(body);
}
