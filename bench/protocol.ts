/** What the orchestrator asks of a load-generator child, and what the child reports back. */

/**
 * `post`: post items; `cycle`: `inFlight` producers posting and `inFlight` workers claiming (with
 * a long poll) and posting results, on connections of their own; `loop`: post → claim → result in
 * turn on each connection; `drain`: claim → result until the queue is empty; `prefill`: post
 * `maxCount` items as fast as possible; `latency` is `post` with every request timed (run it at
 * one in flight).
 */
export type LoadMode = 'post' | 'cycle' | 'loop' | 'drain' | 'prefill' | 'latency' | 'handin' | 'batch-post' | 'drain-batch';
// `handin` (decisions §3.8): the `cycle` with each worker handing its last result in with its next
// claim (`done`), two requests per job; `batch-post`: posts of BATCH_SIZE items each (the rate
// counts items); `drain-batch`: claims of up to 100 items with the last claim's results handed in,
// until the queue is empty.

/** Items per request in `batch-post`, and per claim in `drain-batch`. */
export const BATCH_SIZE = 1000;
export const CLAIM_MAX = 100;

export interface LoadSpec {
  mode: LoadMode;
  /** Base URL of the server, always on 127.0.0.1. */
  url: string;
  /** Several servers (nodes on one database): connections go to them in turn. Absent: `url` only. */
  urls?: string[];
  /** Queue domain sent in the Host header. */
  host: string;
  queue: string;
  /** Concurrent loops, each with at most one request outstanding. */
  inFlight: number;
  /** Loops stop starting new operations after this many milliseconds. */
  durationMs: number;
  /** Loops stop once this many operations have been started (all loops together). */
  maxCount: number;
  /** Size in bytes of each posted JSON item. */
  itemBytes: number;
  /** Time every request (post requests in `post`/`latency`/`prefill`, whole cycles in `loop`). */
  recordLatency: boolean;
  /** The HTTP client: the generator's own raw-socket client (default), or undici (the client inside Node's fetch). */
  client?: 'raw' | 'undici';
  /** The server process: the generator reads its CPU time at the phase's start and end, into `serverCpuMs`. */
  cpuPid?: number;
  /** Every post (and every batch) carries `?priority=N`, N drawn at random from 0 … priorities − 1 (decisions §8.1). */
  priorities?: number;
  /** Every post (and every batch) carries `?delay=S`. */
  delayS?: number;
  /** `drain`: each claim waits up to this many seconds (decisions §3.3 `wait`), so that a claim a rate limit holds back is answered when the window moves on instead of ending the drain. */
  claimWaitS?: number;
  /** `cycle`: the producers together post at most this many items a second (each post waits for its time), so that a phase runs at a given pace. */
  postsPerSecond?: number;
}

export interface LatencySummary {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export interface LoadResult {
  mode: LoadMode;
  /** Completed operations: posts, cycles (results accepted) or drained items. */
  count: number;
  /** Replies that were not 200 or not `ok`, and network errors. */
  errors: number;
  /** Claims answered `{ empty: true }`. */
  empties: number;
  elapsedMs: number;
  /** count per second over elapsedMs. */
  rate: number;
  /** CPU time (user + system) the load generator spent over the phase, in ms. */
  clientCpuMs: number;
  /** CPU time the server spent over the phase, in ms (filled in by the orchestrator, or by the generator given `cpuPid`). */
  serverCpuMs?: number;
  /** Milliseconds, present when recordLatency was set. */
  latency?: LatencySummary;
  firstError?: string;
}

/** The prefix of the one stdout line that carries the child's result. */
export const RESULT_PREFIX = 'BENCH-RESULT ';

/** A JSON item of exactly `bytes` bytes (for any bytes ≥ ~170), shaped like a real job. */
export function makeItem(seq: number, bytes: number): string {
  // What JSON.stringify makes of { seq, kind, user, src, sizes, format, quality, pad }, built as
  // text: the load generator makes tens of thousands a second on the cores the server uses.
  const head = `{"seq":${seq},"kind":"thumbnail","user":"user-${seq % 10_000}","src":"https://files.example.com/uploads/2024/06/IMG_${String(seq).padStart(9, '0')}.jpg","sizes":[64,256,1024],"format":"webp","quality":82,"pad":"`;
  return `${head}${'x'.repeat(Math.max(0, bytes - head.length - 2))}"}`;
}

/** p50/p99/max/mean of a list of milliseconds (sorts it in place). */
export function summarise(ms: Float64Array): LatencySummary {
  if (ms.length === 0) return { n: 0, p50: 0, p99: 0, max: 0, mean: 0 };
  ms.sort();
  const at = (q: number): number => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]!;
  let sum = 0;
  for (const v of ms) sum += v;
  return { n: ms.length, p50: at(0.5), p99: at(0.99), max: ms[ms.length - 1]!, mean: sum / ms.length };
}
