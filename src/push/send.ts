import type { Agent, Dispatcher } from 'undici';

type Undici = typeof import('undici');

/** decisions §9.1: the most text of an answer kept in a result or an error. */
export const ANSWER_TEXT_BYTES = 4096;

/** What one outbound POST came to. */
export interface Sent {
  /** The answer's status code, or null when none came (timeout, refused, reset). */
  status: number | null;
  /** Milliseconds from the start of the request to the end of its answer (or its failure). */
  ms: number;
  /** The answer's body as UTF-8 text, at most `maxBytes` bytes of it (empty when none came). */
  body: string;
  /** Whether the answer's body was longer than `maxBytes` (the rest was read and dropped). */
  truncated: boolean;
  /** One sentence saying why this was not a 2xx, or null when it was one. */
  reason: string | null;
  /**
   * What kind of failure it was: `answer` (the target answered, not 2xx), `timeout`, `connection`
   * (refused, reset, a name not resolved), `abandoned` (the caller's signal); null for a 2xx.
   */
  failure: 'answer' | 'timeout' | 'connection' | 'abandoned' | null;
  /** The answer's `Retry-After` in whole seconds (a number of seconds or an HTTP date), or null. */
  retryAfterSeconds: number | null;
}

/** Options of one {@link send}. */
export interface SendOptions {
  /** Abandon the request after this many milliseconds in all: connecting, the headers and the body. */
  timeoutMs: number;
  /** Keep at most this many bytes of the answer's body (default {@link ANSWER_TEXT_BYTES}). */
  maxBytes?: number;
  /** Where connections come from (default: one agent for the process, keeping connections alive). */
  dispatcher?: Dispatcher;
  /** Abandons the request (a stopping server): the answer is a failure of kind `abandoned`. */
  signal?: AbortSignal;
}

/**
 * undici, loaded at the first outbound call rather than at start: it is half of the server
 * thread's code (1.1 MB of its 2.1 MB bundled), which every server would otherwise read and
 * compile as it starts, whether or not it ever calls out.
 */
let undici: Undici | undefined;
let loading: Promise<Undici> | undefined;
function loadUndici(): Promise<Undici> {
  // Bundled (dist/cli), the package is a CommonJS module in a file of its own, whose exports
  // come as the default export only.
  return (loading ??= import('undici').then((m) => (undici = (m as Partial<Undici>).Agent === undefined ? (m as unknown as { default: Undici }).default : m)));
}

/** A connection pool of its own for outbound calls (see {@link SendOptions.dispatcher}). */
export async function newAgent(options: Agent.Options): Promise<Agent> {
  return new (await loadUndici()).Agent(options);
}

/**
 * The process's connections for outbound calls: kept alive between calls, one pool per origin, so
 * that a push queue's deliveries to one target reuse their connections. undici follows no redirect
 * unless asked to (it is not): a 3xx is an answer like any other, which §9.1 counts as a failure.
 * Made at the first call.
 */
let sharedAgent: Agent | undefined;
const SHARED_AGENT: Agent.Options = { keepAliveTimeout: 10_000, keepAliveMaxTimeout: 60_000, connect: { timeout: 10_000 } };

/** Where a URL's requests go, remembered per URL: callbacks and pushes go to a few URLs, and parsing one each time costs more than the rest of the dispatch. */
const targets = new Map<string, { origin: string; path: string }>();

function targetOf(url: string): { origin: string; path: string } {
  let t = targets.get(url);
  if (t === undefined) {
    const u = new URL(url);
    if (targets.size >= 1000) targets.clear();
    targets.set(url, (t = { origin: u.origin, path: `${u.pathname}${u.search}` }));
  }
  return t;
}

/**
 * One POST of `body` to `url` with `headers`. Never throws: a failure to connect, a reset, a
 * timeout are answers with `status: null` and a reason. The whole exchange is bounded by
 * `timeoutMs` (undici's own header and body timeouts, and one timer over all of it).
 *
 * Dispatched with a handler of its own rather than through undici's `request`: no answer stream,
 * async iterator or AbortController per call, which cost a callback more than the POST itself.
 */
export function send(url: string, body: string | Buffer, headers: Record<string, string>, options: SendOptions): Promise<Sent> {
  if (undici === undefined) return loadUndici().then(() => send(url, body, headers, options));
  const { errors, Agent } = undici;
  const { timeoutMs } = options;
  const maxBytes = options.maxBytes ?? ANSWER_TEXT_BYTES;
  const signal = options.signal;
  const started = performance.now();
  return new Promise<Sent>((resolve) => {
    let status: number | null = null;
    let location: string | string[] | undefined;
    let retryAfterHeader: string | string[] | undefined;
    const kept: Buffer[] = [];
    let size = 0;
    let truncated = false;
    let controller: Dispatcher.DispatchController | undefined;
    let timedOut = false;
    let done = false;
    const stop = (reason: Error): void => {
      // Before the request is on a connection there is nothing to abort yet: it is aborted as it starts.
      if (controller && !controller.aborted) controller.abort(reason);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop(new errors.RequestAbortedError('timed out'));
    }, timeoutMs);
    const abandon = (): void => stop(new errors.RequestAbortedError('abandoned'));
    signal?.addEventListener('abort', abandon, { once: true });
    const finish = (sent: Omit<Sent, 'ms'>): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', abandon);
      resolve({ ...sent, ms: Math.round(performance.now() - started) });
    };
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(c) {
        controller = c;
        if (timedOut) c.abort(new errors.RequestAbortedError('timed out'));
        else if (signal?.aborted) c.abort(new errors.RequestAbortedError('abandoned'));
      },
      onResponseStart(_c, statusCode, answerHeaders) {
        // An informational answer (1xx) is followed by the real one.
        if (statusCode < 200) return;
        status = statusCode;
        location = answerHeaders.location;
        retryAfterHeader = answerHeaders['retry-after'];
      },
      // The rest past maxBytes is read and dropped, not cut off, so that the connection can be reused.
      onResponseData(_c, chunk) {
        if (size < maxBytes) kept.push(size + chunk.length > maxBytes ? chunk.subarray(0, maxBytes - size) : chunk);
        if (size + chunk.length > maxBytes) truncated = true;
        size += chunk.length;
      },
      onResponseEnd() {
        const code = status ?? 0;
        const ok = code >= 200 && code < 300;
        finish({
          status,
          body: kept.length === 0 ? '' : kept.length === 1 ? kept[0]!.toString('utf8') : Buffer.concat(kept).toString('utf8'),
          truncated,
          reason: ok ? null : answerReason(code, location),
          failure: ok ? null : 'answer',
          retryAfterSeconds: retryAfterHeader === undefined ? null : retryAfter(retryAfterHeader, Date.now()),
        });
      },
      onResponseError(_c, error) {
        if (signal?.aborted) return finish({ status, body: '', truncated: false, reason: 'the request was abandoned', failure: 'abandoned', retryAfterSeconds: null });
        const late = timedOut || error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError || error instanceof errors.ConnectTimeoutError;
        finish({ status, body: '', truncated: false, reason: failureReason(error, status, timeoutMs, late, errors), failure: late ? 'timeout' : 'connection', retryAfterSeconds: null });
      },
    };
    try {
      const { origin, path } = targetOf(url);
      (options.dispatcher ?? (sharedAgent ??= new Agent(SHARED_AGENT))).dispatch({ origin, path, method: 'POST', body, headers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs }, handler);
    } catch (error) {
      handler.onResponseError!(controller!, error as Error);
    }
  });
}

function answerReason(status: number, location: string | string[] | undefined): string {
  if (status >= 300 && status < 400) {
    const to = Array.isArray(location) ? location[0] : location;
    return `the target answered ${status}, a redirect${to === undefined ? '' : ` to ${to}`}, which is not followed`;
  }
  return `the target answered ${status}`;
}

function failureReason(error: unknown, status: number | null, timeoutMs: number, timedOut: boolean, errors: Undici['errors']): string {
  const within = `within ${formatSeconds(timeoutMs)}`;
  const code = (error as { code?: unknown }).code;
  if (timedOut) {
    return status === null ? `no answer ${within}` : `the answer ${status} did not end ${within}`;
  }
  if (code === 'ECONNREFUSED') return 'the connection was refused';
  if (code === 'ECONNRESET' || code === 'EPIPE' || error instanceof errors.SocketError) {
    return status === null ? 'the connection was closed before an answer' : `the connection was closed during the answer ${status}`;
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'the host name could not be resolved';
  const message = error instanceof Error ? error.message : String(error);
  return `the request failed: ${message}`;
}

function formatSeconds(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000} s` : `${(ms / 1000).toFixed(1)} s`;
}

/** The seconds a `Retry-After` asks for: a whole number of seconds, or an HTTP date; null when absent or unreadable. */
export function retryAfter(value: string | string[] | undefined, nowMs: number): number | null {
  const text = (Array.isArray(value) ? value[0] : value)?.trim();
  if (text === undefined || text === '') return null;
  if (/^\d+$/.test(text)) return Math.min(Number(text), 31_536_000);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return null;
  return Math.min(Math.max(0, Math.ceil((at - nowMs) / 1000)), 31_536_000);
}
