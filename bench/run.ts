/**
 * `npm run bench`: starts real `svcq serve` processes on temp roots, drives them from a separate
 * load-generator process over keep-alive HTTP, prints a table and writes bench/results/<stamp>.json.
 *
 *   --sizes 100000,1000000   backlog sizes (items waiting) for the backlog phases
 *   --duration 5             seconds per throughput phase
 *   --quick                  sizes 20000, 1.5 s phases, 8,000-job cycles: the whole run in about a minute
 *   --vs bullmq              also run the full cycle against BullMQ on a private redis-server
 *   --vs rabbitmq,bullmq     also the full cycle through svcq's client library beside RabbitMQ's
 *                            quorum queue (and BullMQ), with each server's CPU per job (bench/beside.ts)
 *   --vs-only                with --vs: only those comparisons, none of the other phases
 *   --vs-svcq client         svcq's side of those: its client library (client, the default) or the
 *                            bench's own hand-in loop over raw sockets (handin)
 *   --amqp URL               the RabbitMQ node (default amqp://guest:guest@127.0.0.1:5672)
 *   --rounds 5               paired rounds for every ratio (1 with --quick): see bench/README.md
 *   --cpu-prof               also profile the server over one cycle phase and summarise it
 *   --keep                   keep the temp roots (printed) instead of removing them
 *   --phases empty,floor,schedules,backlog   which groups of phases run (these four by default; `schedules`:
 *                            the idle server's CPU with 1,000 every-second schedules); two more,
 *                            off by default as they take minutes: `priority` (posts and the full cycle
 *                            with a random priority of 10 against plain ones, paired by round) and
 *                            `backlog-prio` (posts, full cycle and claims with 1,000,000 items waiting
 *                            across 10 priorities and 100,000 delayed, against an empty server beside it)
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import chalk from 'chalk';
import { summariseProfile } from './profile-summary.js';
import { execFileSync } from 'node:child_process';
import { BENCH_DIR, REPO, snapshotBuild, killAll, runBullmq, runLoad, startFloor, startRedis, startSvcq, type BullmqResult, type Svcq } from './procs.js';
import { BATCH_SIZE, CLAIM_MAX, type LoadMode, type LoadResult, type LoadSpec } from './protocol.js';
import { besideVerdicts, renderBeside, runBeside, type BesideRun, type SvcqDriver, type System } from './beside.js';
import { prioVerdicts, renderPrio, renderTable, sizeName, verdicts, type BacklogRun, type BenchRun, type Duo, type Pair, type PrioRun, type RestartFigures } from './report.js';
import { describeSchedules, measureSchedules } from './idle-schedules.js';

const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const QUEUE_DEF = JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } });

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string' },
    duration: { type: 'string' },
    quick: { type: 'boolean', default: false },
    vs: { type: 'string' },
    'vs-only': { type: 'boolean', default: false },
    'vs-svcq': { type: 'string', default: 'client' },
    amqp: { type: 'string', default: 'amqp://guest:guest@127.0.0.1:5672' },
    rounds: { type: 'string' },
    'cpu-prof': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    'in-flight': { type: 'string', default: '32' },
    'item-bytes': { type: 'string', default: '190' },
    phases: { type: 'string', default: 'empty,floor,schedules,backlog' },
  },
  strict: true,
});

function positiveInts(text: string, flag: string): number[] {
  const list = text.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0)) throw new Error(`--${flag} must be positive integers separated by commas, not "${text}"`);
  return list;
}

const sizes = positiveInts(opts.sizes ?? (opts.quick ? '20000' : '100000,1000000'), 'sizes').sort((a, b) => a - b);
const durationS = Number(opts.duration ?? (opts.quick ? 1.5 : 5));
if (!(durationS > 0 && durationS <= 600)) throw new Error(`--duration must be seconds between 0 and 600, not "${opts.duration}"`);
const peers = (opts.vs ?? '').split(',').map((s) => s.trim()).filter(Boolean);
for (const p of peers) if (p !== 'bullmq' && p !== 'rabbitmq') throw new Error(`--vs knows "bullmq" and "rabbitmq", not "${p}"`);
if (opts['vs-only'] && peers.length === 0) throw new Error('--vs-only needs --vs');
if (opts['vs-svcq'] !== 'client' && opts['vs-svcq'] !== 'handin') throw new Error(`--vs-svcq is "client" or "handin", not "${opts['vs-svcq']}"`);
const svcqDriver: SvcqDriver = opts['vs-svcq'];
const inFlight = positiveInts(opts['in-flight'], 'in-flight')[0]!;
const itemBytes = positiveInts(opts['item-bytes'], 'item-bytes')[0]!;
const durationMs = durationS * 1000;
const rounds = positiveInts(opts.rounds ?? (opts.quick ? '1' : '5'), 'rounds')[0]!;
/** Rounds of the comparison beside RabbitMQ (and BullMQ): three unless --rounds says otherwise. */
const besideRounds = opts.rounds === undefined ? 3 : rounds;
// Long enough for the JIT and for V8 to grow its young generation to full size after a (re)start.
const warmupMs = Math.min(3000, durationMs);
const PREFILL_IN_FLIGHT = 64;
/** Jobs per full-cycle phase, on svcq and on BullMQ alike: each phase runs from the first post to the last result. */
const CYCLE_JOBS = opts.quick ? 8_000 : 20_000;
const cyclePhase = { maxCount: CYCLE_JOBS, durationMs: 120_000 };
const PHASES = ['empty', 'floor', 'schedules', 'backlog', 'priority', 'backlog-prio'] as const;
const phases = new Set(opts.phases.split(',').map((p) => p.trim()));
for (const p of phases) if (!(PHASES as readonly string[]).includes(p)) throw new Error(`--phases knows ${PHASES.join(', ')}, not "${p}"`);
/** Priority levels (0 … 9) and the backlog of the `backlog-prio` phases. */
const PRIO_LEVELS = 10;
const PRIO_WAITING = opts.quick ? 100_000 : 1_000_000;
const PRIO_DELAYED = PRIO_WAITING / 10;
/** Far enough into the future that no delayed item becomes claimable during the run (one year). */
const FAR_DELAY_S = 31_536_000;

const roots: string[] = [];
function tempRoot(tag: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), `svcq-bench-${tag}-`));
  roots.push(dir);
  return dir;
}
function cleanup(): void {
  killAll();
  if (opts.keep) {
    if (roots.length) console.log(`kept: ${roots.join(' ')}`);
    return;
  }
  for (const dir of roots.splice(0)) rmSync(dir, { recursive: true, force: true });
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping every process the bench started`);
    cleanup();
    process.exit(130);
  });
}

const log = (line: string): void => console.log(chalk.dim(`[${new Date().toISOString().slice(11, 19)}] ${line}`));

/** One request from the orchestrator (set-up and the restart probe), not part of any measured load. */
function call(url: string, method: string, pathAndQuery: string, body: string | undefined, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const base = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: Number(base.port), method, path: pathAndQuery, agent: false, headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : {}) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${pathAndQuery} took over 30 s`)));
    req.end(body);
  });
}

async function defineQueues(server: Svcq, names: string[]): Promise<void> {
  for (const name of names) {
    const reply = await call(server.url, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/${name}.json`, QUEUE_DEF, { authorization: `Bearer ${MASTER}` });
    if (reply.status !== 200) throw new Error(`defining queue ${name} failed: ${reply.status} ${reply.text}`);
  }
}

async function load(server: Pick<Svcq, 'url' | 'cpuMs'> & Partial<Pick<Svcq, 'output'>>, mode: LoadMode, queue: string, extra: Partial<LoadSpec> = {}): Promise<LoadResult> {
  const cpu0 = server.cpuMs();
  const result = await runLoad({ mode, url: server.url, host: HOST, queue, inFlight, durationMs, maxCount: Number.MAX_SAFE_INTEGER, itemBytes, recordLatency: false, ...extra }).catch(
    async (err: Error) => {
      // Tell a server that stopped answering from a load generator that stopped asking.
      const t0 = performance.now();
      const probe = await Promise.race([
        call(server.url, 'POST', `/${queue}`, '{"probe":true}', { host: HOST }).then((r) => `the server answered a post with ${r.status} in ${Math.round(performance.now() - t0)} ms`),
        sleep(5000).then(() => 'the server did not answer a post within 5 s'),
      ]).catch((e: Error) => `a post to the server failed: ${e.message}`);
      throw new Error(`${err.message}\nafterwards, ${probe}; the server printed:\n${server.output?.() ?? '(not kept)'}`);
    },
  );
  // Includes the load child's start-up, when the server idles: a slight underestimate of its share.
  result.serverCpuMs = server.cpuMs() - cpu0;
  if (result.errors > 0) {
    const said = (server.output?.() ?? '').split('\n').filter((line) => line.startsWith('svcq:')).slice(-5).join('\n');
    log(chalk.yellow(`${mode} on ${queue}: ${result.errors} requests failed (the first: ${result.firstError})${said ? `; the server said:\n${said}` : ''}`));
  }
  return result;
}

const cpuShare = (ms: number | undefined, r: LoadResult): string => (ms === undefined ? '?' : `${Math.round((100 * ms) / r.elapsedMs)}%`);

function checked(what: string, r: LoadResult): LoadResult {
  const errors = r.errors ? chalk.red(`, ${r.errors} errors (first: ${r.firstError})`) : '';
  log(`${what}: ${Math.round(r.rate).toLocaleString('en-US')}/s (${r.count.toLocaleString('en-US')} in ${(r.elapsedMs / 1000).toFixed(1)} s${r.empties ? `, ${r.empties} empty claims` : ''}; CPU server ${cpuShare(r.serverCpuMs, r)}, load generator ${cpuShare(r.clientCpuMs, r)})${errors}`);
  return r;
}

/** Median of a few RSS samples after the server has been idle for a moment. */
async function settledRss(server: Svcq): Promise<number> {
  await sleep(2000);
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    samples.push(server.rss());
    await sleep(200);
  }
  return samples.sort((a, b) => a - b)[2]!;
}

/** Claims until an item comes back (then finishes it); resolves to the time that took. */
async function firstClaim(server: Svcq, queue: string, limitMs: number): Promise<void> {
  const until = performance.now() + limitMs;
  while (performance.now() < until) {
    const reply = await call(server.url, 'POST', `/${queue}/claim`, '{"worker":"bench-restart"}', { host: HOST });
    if (reply.status === 200) {
      const body = JSON.parse(reply.text) as { empty?: boolean; id?: string };
      if (!body.empty && body.id) {
        await call(server.url, 'POST', `/${queue}/items/${body.id}/result`, '{"output":"done"}', { host: HOST });
        return;
      }
    }
    await sleep(5);
  }
  throw new Error(`no item could be claimed from ${queue} within ${limitMs / 1000} s of the restart`);
}

/**
 * The empty-queue phases. The full cycle runs `rounds` times, each on a fresh queue; with a peer,
 * each round is paired with one of the peer's, taken right before or after it (alternately), so
 * that their ratio compares the two under the same conditions on a machine whose speed drifts.
 */
async function emptyPhases(peer?: Peer): Promise<{ empty: BenchRun['empty']; bullmq?: NonNullable<BenchRun['bullmq']> }> {
  log('empty queue: starting svcq serve');
  const server = await startSvcq({ root: tempRoot('empty'), masterToken: MASTER });
  const cycleQueues = Array.from({ length: rounds }, (_, r) => `cycle-${r}`);
  const handinQueues = Array.from({ length: rounds }, (_, r) => [`handin-${r}`, `handin-undici-${r}`, `cycle-undici-${r}`]).flat();
  await defineQueues(server, ['warm', 'post', 'lat', 'batch', ...cycleQueues, ...handinQueues]);
  await load(server, 'cycle', 'warm', { durationMs: warmupMs });
  const post = checked('post, empty', await load(server, 'post', 'post'));
  const cycleRounds: LoadResult[] = [];
  const handinRounds: LoadResult[] = [];
  const handinUndiciRounds: LoadResult[] = [];
  const cycleUndiciRounds: LoadResult[] = [];
  const peerRounds: BullmqResult[] = [];
  for (let r = 0; r < rounds; r++) {
    const round = rounds > 1 ? ` (round ${r + 1} of ${rounds})` : '';
    const ours = async (): Promise<void> => {
      cycleRounds.push(checked(`full cycle, empty${round}`, await load(server, 'cycle', cycleQueues[r]!, cyclePhase)));
      handinRounds.push(checked(`full cycle with hand-ins, empty${round}`, await load(server, 'handin', `handin-${r}`, cyclePhase)));
      handinUndiciRounds.push(checked(`full cycle with hand-ins, undici clients${round}`, await load(server, 'handin', `handin-undici-${r}`, { ...cyclePhase, client: 'undici' })));
      cycleUndiciRounds.push(checked(`full cycle, undici clients${round}`, await load(server, 'cycle', `cycle-undici-${r}`, { ...cyclePhase, client: 'undici' })));
    };
    const theirs = async (): Promise<void> => {
      if (peer) peerRounds.push(await peer.round(r));
    };
    if (r % 2 === 0) {
      await ours();
      await theirs();
    } else {
      await theirs();
      await ours();
    }
  }
  const cycle = medianRun(cycleRounds);
  const loop = checked('post→claim→result in one loop, empty', await load(server, 'loop', cycleQueues[0]!));
  // The post phase left its items waiting: that is the pre-filled queue to drain.
  const drain = checked('drain', await load(server, 'drain', 'post'));
  const latency = checked('post at 1 in flight', await load(server, 'latency', 'lat', { inFlight: 1, recordLatency: true }));
  const batchPost = checked(`batch posts of ${BATCH_SIZE} items, 4 in flight`, await load(server, 'batch-post', 'batch', { inFlight: 4 }));
  const drainBatch = checked(`drain of ${batchPost.count.toLocaleString('en-US')} by claims of ${CLAIM_MAX} with hand-ins, 4 in flight`, await load(server, 'drain-batch', 'batch', { inFlight: 4, durationMs: 120_000 }));
  await server.stop();
  const empty = { post, cycle, cycleRounds, loop, drain, latency, drainQueued: post.count, handinRounds, handinUndiciRounds, cycleUndiciRounds, batchPost, drainBatch };
  if (!peer) return { empty };
  const bullmq = { ...peerRounds[cycleRounds.indexOf(cycle)]!, jobs: CYCLE_JOBS, rounds: peerRounds };
  return { empty, bullmq };
}

/** Slices per side in each paired backlog phase (see backlogPhases). */
const SLICES = 4;

/** Slices of one phase as one result: their counts over their summed time. */
function merged(slices: LoadResult[]): LoadResult {
  const sum = (f: (x: LoadResult) => number | undefined): number => slices.reduce((t, x) => t + (f(x) ?? 0), 0);
  const count = sum((x) => x.count);
  const elapsedMs = sum((x) => x.elapsedMs);
  return {
    mode: slices[0]!.mode,
    count,
    errors: sum((x) => x.errors),
    empties: sum((x) => x.empties),
    elapsedMs,
    rate: (count * 1000) / elapsedMs,
    clientCpuMs: sum((x) => x.clientCpuMs),
    serverCpuMs: sum((x) => x.serverCpuMs),
    firstError: slices.find((x) => x.firstError)?.firstError,
  };
}

/** The round with the median rate (the lower middle one of an even number). */
function medianRun<T extends { rate: number }>(list: T[]): T {
  return [...list].sort((a, b) => a.rate - b.rate)[Math.floor((list.length - 1) / 2)]!;
}

interface Peer {
  round(r: number): Promise<BullmqResult>;
  stop(): Promise<void>;
}

/**
 * One backlog size: a fresh server, RSS before and after a prefill of `size` items, a restart,
 * then post and full cycle on the backlog queue in `rounds` rounds, each paired with the same
 * phase on an empty reference server running beside it (a fresh queue per round), the two sides
 * taking turns in slices, so that each "vs empty" ratio is taken under the same conditions.
 */
async function backlogPhases(size: number): Promise<BacklogRun> {
  const root = tempRoot(`n${size}`);
  log(`${size.toLocaleString('en-US')} waiting: starting svcq serve`);
  let server = await startSvcq({ root, masterToken: MASTER });
  await defineQueues(server, ['warm', 'backlog']);
  const rssFreshEmpty = await settledRss(server);
  await load(server, 'cycle', 'warm', { durationMs: warmupMs });
  const rssEmpty = await settledRss(server);
  const prefill = checked(`prefill ${size}`, await load(server, 'prefill', 'backlog', { inFlight: PREFILL_IN_FLIGHT, maxCount: size, durationMs: 30 * 60_000 }));
  if (prefill.count !== size) throw new Error(`the prefill posted ${prefill.count} of ${size} items (${prefill.errors} errors, first: ${prefill.firstError})`);
  const rssWaiting = await settledRss(server);
  log(`RSS empty ${(rssEmpty / 2 ** 20).toFixed(1)} MiB, with ${size} waiting ${(rssWaiting / 2 ** 20).toFixed(1)} MiB`);

  const stopMs = await server.stop();
  const t0 = performance.now();
  server = await startSvcq({ root, masterToken: MASTER });
  await firstClaim(server, 'backlog', 120_000);
  const restart: RestartFigures = { waiting: size, stopMs, listenMs: server.startMs, firstClaimMs: performance.now() - t0, rssAfter: 0 };
  restart.rssAfter = await settledRss(server);
  log(`restart: stop ${(stopMs / 1000).toFixed(2)} s, listening ${(restart.listenMs / 1000).toFixed(2)} s, first claim ${(restart.firstClaimMs / 1000).toFixed(2)} s`);

  // The empty reference: a second server, started now so that it meets the same machine.
  log(`${sizeName(size)} waiting: starting an empty reference server beside it`);
  const ref = await startSvcq({ root: tempRoot(`ref${size}`), masterToken: MASTER });
  await defineQueues(ref, ['warm', ...Array.from({ length: rounds }, (_, r) => [`post-${r}`, `cycle-${r}`]).flat()]);
  await load(ref, 'cycle', 'warm', { durationMs: warmupMs });
  await load(server, 'cycle', 'warm', { durationMs: warmupMs });
  const pairs: BacklogRun['pairs'] = [];
  for (let r = 0; r < rounds; r++) {
    const which = rounds > 1 ? ` (round ${r + 1} of ${rounds})` : '';
    // Each side's phase is cut into SLICES that take turns with the other side's, so that a slowdown
    // of the machine lasting a few seconds falls on both rather than on one.
    const pair = async (mode: LoadMode, what: string, refQueue: string, slice: Partial<LoadSpec>): Promise<Pair> => {
      const backlog: LoadResult[] = [];
      const empty: LoadResult[] = [];
      for (let s = 0; s < SLICES; s++) {
        const sides = [() => load(server, mode, 'backlog', slice).then((x) => backlog.push(x)), () => load(ref, mode, refQueue, slice).then((x) => empty.push(x))];
        if ((r + s) % 2 === 1) sides.reverse();
        for (const side of sides) await side();
      }
      return { backlog: checked(`${what}, ${sizeName(size)} waiting${which}`, merged(backlog)), empty: checked(`${what}, empty reference${which}`, merged(empty)) };
    };
    const post = await pair('post', 'post', `post-${r}`, { durationMs: durationMs / SLICES });
    const cycle = await pair('cycle', 'full cycle', `cycle-${r}`, { ...cyclePhase, maxCount: CYCLE_JOBS / SLICES });
    pairs.push({ post, cycle });
  }
  await server.stop();
  await ref.stop();
  if (!opts.keep) rmSync(root, { recursive: true, force: true });
  return { size, prefill, rssEmpty, rssWaiting, restart, rssFreshEmpty, pairs };
}

/** BullMQ on a private redis-server, one full cycle of CYCLE_JOBS per round, each on a queue of its own. */
async function startBullmq(): Promise<Peer> {
  const jobs = CYCLE_JOBS;
  log('BullMQ: starting a private redis-server (appendonly yes, appendfsync everysec)');
  const redis = await startRedis(tempRoot('redis'));
  return {
    async round(r) {
      const result = await runBullmq({ redisPort: redis.port, jobs, inFlight, itemBytes, timeoutMs: 120_000 });
      const which = rounds > 1 ? ` (round ${r + 1} of ${rounds})` : '';
      log(`BullMQ full cycle${which}: ${Math.round(result.rate).toLocaleString('en-US')}/s (${result.completed} of ${jobs} jobs in ${(result.elapsedMs / 1000).toFixed(1)} s${result.timedOut ? ', TIMED OUT' : ''})`);
      return result;
    },
    stop: () => redis.stop(),
  };
}

/**
 * svcq through its client library beside RabbitMQ's quorum queue and/or BullMQ (bench/beside.ts),
 * on a server of its own, CYCLE_JOBS per round, in `besideRounds` rounds of rotating order.
 */
async function besidePhases(): Promise<BesideRun> {
  const systems: System[] = ['svcq', ...(['rabbitmq', 'bullmq'] as const).filter((p) => peers.includes(p))];
  log(`beside ${systems.slice(1).join(' and ')}: starting svcq serve`);
  const server = await startSvcq({ root: tempRoot('beside'), masterToken: MASTER });
  try {
    return await runBeside({
      systems,
      svcqDriver,
      jobs: CYCLE_JOBS,
      inFlight,
      itemBytes,
      rounds: besideRounds,
      amqpUrl: opts.amqp,
      svcq: server,
      host: HOST,
      defineQueue: (name) => defineQueues(server, [name]),
      redisDir: tempRoot('beside-redis'),
      log,
    });
  } finally {
    await server.stop();
  }
}

/**
 * The bare node:http handler of bench/floor-server.ts: answering at once, then answering after an
 * O_DSYNC group write at the post phase's connections, at the full cycle's (producers and workers),
 * at the full cycle's with undici as the client, and at one in flight for latency.
 */
/**
 * The idle server's CPU with 1,000 `every: 1` schedules (100 on each of 10 queues; decisions
 * §8.3) over 20 s (5 with --quick), and how late their occurrences were posted.
 */
async function schedulePhase(): Promise<NonNullable<BenchRun['schedules']>> {
  const server = await startSvcq({ root: tempRoot('schedules'), masterToken: MASTER });
  try {
    const figures = await measureSchedules(server.url, MASTER, () => server.cpuMs(), opts.quick ? 5 : 20);
    log(`schedules: ${describeSchedules(figures)}`);
    return figures;
  } finally {
    await server.stop();
  }
}

async function floorPhases(): Promise<NonNullable<BenchRun['floor']>> {
  const dir = tempRoot('floor');
  const run = async (durable: boolean, phases: Array<[string, Partial<LoadSpec>]>): Promise<LoadResult[]> => {
    const server = await startFloor({ durable, dir });
    try {
      await load(server, 'post', 'floor', { durationMs: warmupMs });
      const out: LoadResult[] = [];
      for (const [what, extra] of phases) out.push(checked(`floor: bare node:http handler${durable ? ' answering after an O_DSYNC group write' : ''}, ${what}`, await load(server, extra.recordLatency ? 'latency' : 'post', 'floor', extra)));
      return out;
    } finally {
      await server.stop();
    }
  };
  const [plain] = await run(false, [[`${inFlight} in flight`, {}]]);
  const [durable, durableCycle, durableUndici, durableLatency] = await run(true, [
    [`${inFlight} in flight`, {}],
    [`${2 * inFlight} in flight`, { inFlight: 2 * inFlight }],
    [`${2 * inFlight} in flight, undici clients`, { inFlight: 2 * inFlight, client: 'undici' }],
    ['1 in flight', { inFlight: 1, recordLatency: true }],
  ]);
  return { plain: plain!, durable: durable!, durableCycle: durableCycle!, durableUndici: durableUndici!, durableLatency: durableLatency! };
}

async function profilePhase(stamp: string): Promise<NonNullable<BenchRun['profile']>> {
  const dir = tempRoot('prof');
  log('profile: svcq serve under --cpu-prof, one full-cycle phase');
  const server = await startSvcq({ root: path.join(dir, 'root'), masterToken: MASTER, nodeArgs: ['--cpu-prof', '--cpu-prof-dir', path.join(dir, 'prof')] });
  await defineQueues(server, ['warm', 'cycle']);
  await load(server, 'cycle', 'warm', { durationMs: warmupMs });
  const fromMs = performance.now() - server.spawnedAt;
  const cycle = checked('full cycle under --cpu-prof', await load(server, 'cycle', 'cycle', cyclePhase));
  const toMs = performance.now() - server.spawnedAt;
  await server.stop();
  // One profile per thread (CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile): the server runs on thread 1, not on the main thread.
  const threadOf = (f: string): number => Number(f.split('.')[4] ?? -1);
  const name = readdirSync(path.join(dir, 'prof'))
    .filter((f) => f.endsWith('.cpuprofile'))
    .sort((a, b) => threadOf(b) - threadOf(a))[0];
  if (!name) throw new Error('the server wrote no .cpuprofile');
  const file = path.join(BENCH_DIR, 'results', `${stamp}-server.cpuprofile`);
  writeFileSync(file, readFileSync(path.join(dir, 'prof', name)));
  return { file: path.relative(process.cwd(), file), cycle, top: summariseProfile(file, 25, { fromMs, toMs }) };
}

/**
 * `priority`: one server; in each round, posts and the full cycle with every item given a random
 * priority of PRIO_LEVELS (decisions §8.1) right beside the same phases without options, each on a
 * fresh queue, the order alternating from round to round.
 */
async function priorityPhases(): Promise<NonNullable<PrioRun['priority']>> {
  log('priorities: starting svcq serve');
  const server = await startSvcq({ root: tempRoot('prio'), masterToken: MASTER });
  const kinds = ['post-plain', 'post-prio', 'cycle-plain', 'cycle-prio'];
  await defineQueues(server, ['warm', 'warm-prio', ...Array.from({ length: rounds }, (_, r) => kinds.map((k) => `${k}-${r}`)).flat()]);
  await load(server, 'cycle', 'warm', { durationMs: warmupMs });
  await load(server, 'cycle', 'warm-prio', { durationMs: warmupMs, priorities: PRIO_LEVELS });
  const prio = { priorities: PRIO_LEVELS };
  const out: NonNullable<PrioRun['priority']>['rounds'] = [];
  for (let r = 0; r < rounds; r++) {
    const which = rounds > 1 ? ` (round ${r + 1} of ${rounds})` : '';
    const duo = async (mode: LoadMode, what: string, extra: Partial<LoadSpec>): Promise<Duo> => {
      const sides = [
        async () => checked(`${what} with a random priority of ${PRIO_LEVELS}${which}`, await load(server, mode, `${mode}-prio-${r}`, { ...extra, ...prio })),
        async () => checked(`${what}, plain${which}`, await load(server, mode, `${mode}-plain-${r}`, extra)),
      ];
      if (r % 2 === 1) sides.reverse();
      const [x, y] = [await sides[0]!(), await sides[1]!()];
      return r % 2 === 1 ? { a: y, b: x } : { a: x, b: y };
    };
    const post = await duo('post', 'post', {});
    const cycle = await duo('cycle', 'full cycle', cyclePhase);
    out.push({ post, cycle });
  }
  await server.stop();
  return { levels: PRIO_LEVELS, rounds: out };
}

/**
 * `backlog-prio`: a server holding PRIO_WAITING claimable items across PRIO_LEVELS priorities and
 * PRIO_DELAYED items delayed a year (seeded first, so that they come ahead of every claimable item of
 * their priority; batch posts of 1,000, each batch with a random priority), beside an empty reference server. In each round: posts, the full cycle and claim →
 * result (`drain` for CYCLE_JOBS claims), all with a random priority on every post, each side's
 * phase cut into SLICES taking turns with the other's. The reference's claims take items from a
 * queue filled, just before, with as many as they claim.
 */
async function backlogPrioPhases(): Promise<NonNullable<PrioRun['backlogPrio']>> {
  log(`${sizeName(PRIO_WAITING)} waiting across ${PRIO_LEVELS} priorities + ${sizeName(PRIO_DELAYED)} delayed: starting svcq serve`);
  const server = await startSvcq({ root: tempRoot('bprio'), masterToken: MASTER });
  await defineQueues(server, ['warm', 'backlog']);
  await load(server, 'cycle', 'warm', { durationMs: warmupMs, priorities: PRIO_LEVELS });
  const t0 = performance.now();
  const seed = async (items: number, extra: Partial<LoadSpec>, what: string): Promise<void> => {
    const r = checked(what, await load(server, 'batch-post', 'backlog', { inFlight: 4, maxCount: items / BATCH_SIZE, durationMs: 30 * 60_000, ...extra }));
    if (r.count !== items) throw new Error(`${what}: ${r.count} of ${items} items posted (${r.errors} errors, first: ${r.firstError})`);
  };
  // The delayed items first: they come ahead of every claimable one in the claim order of their priority.
  await seed(PRIO_DELAYED, { priorities: PRIO_LEVELS, delayS: FAR_DELAY_S }, `seed ${sizeName(PRIO_DELAYED)} delayed by ${FAR_DELAY_S} s`);
  await seed(PRIO_WAITING, { priorities: PRIO_LEVELS }, `seed ${sizeName(PRIO_WAITING)} across ${PRIO_LEVELS} priorities`);
  const seedMs = performance.now() - t0;

  log('starting an empty reference server beside it');
  const ref = await startSvcq({ root: tempRoot('bprio-ref'), masterToken: MASTER });
  await defineQueues(ref, ['warm', ...Array.from({ length: rounds }, (_, r) => [`post-${r}`, `cycle-${r}`, `claim-${r}`]).flat()]);
  await load(ref, 'cycle', 'warm', { durationMs: warmupMs, priorities: PRIO_LEVELS });
  await load(server, 'cycle', 'warm', { durationMs: warmupMs, priorities: PRIO_LEVELS });
  const prio = { priorities: PRIO_LEVELS };
  const out: NonNullable<PrioRun['backlogPrio']>['rounds'] = [];
  for (let r = 0; r < rounds; r++) {
    const which = rounds > 1 ? ` (round ${r + 1} of ${rounds})` : '';
    const pair = async (mode: LoadMode, what: string, refQueue: string, slice: Partial<LoadSpec>): Promise<Duo> => {
      const backlog: LoadResult[] = [];
      const empty: LoadResult[] = [];
      for (let s = 0; s < SLICES; s++) {
        const sides = [() => load(server, mode, 'backlog', { ...slice, ...prio }).then((x) => backlog.push(x)), () => load(ref, mode, refQueue, { ...slice, ...prio }).then((x) => empty.push(x))];
        if ((r + s) % 2 === 1) sides.reverse();
        for (const side of sides) await side();
      }
      return { a: checked(`${what}, ${sizeName(PRIO_WAITING)} + ${sizeName(PRIO_DELAYED)} delayed${which}`, merged(backlog)), b: checked(`${what}, empty reference${which}`, merged(empty)) };
    };
    const post = await pair('post', 'post', `post-${r}`, { durationMs: durationMs / SLICES });
    const cycle = await pair('cycle', 'full cycle', `cycle-${r}`, { ...cyclePhase, maxCount: CYCLE_JOBS / SLICES });
    // The reference's claim queue holds exactly what its claims take.
    await load(ref, 'batch-post', `claim-${r}`, { inFlight: 4, maxCount: Math.ceil(CYCLE_JOBS / BATCH_SIZE), durationMs: 120_000, ...prio });
    const claim = await pair('drain', 'claim → result', `claim-${r}`, { durationMs: 120_000, maxCount: CYCLE_JOBS / SLICES });
    out.push({ post, cycle, claim });
  }
  await server.stop();
  await ref.stop();
  return { levels: PRIO_LEVELS, waiting: PRIO_WAITING, delayed: PRIO_DELAYED, seedMs, rounds: out };
}

async function main(): Promise<void> {
  const started = new Date();
  const stamp = started.toISOString().slice(0, 19).replace(/:/g, '-');
  mkdirSync(path.join(BENCH_DIR, 'results'), { recursive: true });
  snapshotBuild(path.join(tempRoot('build'), 'svcq'));
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: REPO, encoding: 'utf8' }).trim();
  const build = { commit: git('rev-parse', '--short', 'HEAD'), dirty: git('status', '--porcelain', '--untracked-files=no', '--', 'src', 'commands') !== '' };
  const cpus = os.cpus();
  const run: BenchRun = {
    date: started.toISOString(),
    machine: { cpus: cpus.length, cpuModel: cpus[0]?.model ?? '?', memGiB: Math.round(os.totalmem() / 2 ** 30), node: process.version, os: `${os.type()} ${os.release()}` },
    build,
    load: { start: os.loadavg()[0]!, end: Number.NaN },
    options: { sizes, durationS, inFlight, itemBytes, rounds, vs: opts.vs },
    empty: undefined as unknown as BenchRun['empty'],
    backlogs: [],
  };
  const header = (): void => {
    console.log('');
    console.log(chalk.bold(`svcq bench ${run.date} — ${run.machine.cpus}× ${run.machine.cpuModel}, ${run.machine.memGiB} GiB, node ${run.machine.node}; svcq ${build.commit}${build.dirty ? ' + uncommitted src changes' : ''}; ${itemBytes}-byte items, ${durationS} s per phase`));
    const busy = run.load.start > 0.5 ? chalk.yellow(' — the machine was busy before the run: figures are low') : '';
    console.log(`1-minute load average: ${run.load.start.toFixed(2)} at start, ${run.load.end.toFixed(2)} at end${busy}`);
  };
  if (peers.includes('rabbitmq') || opts['vs-only']) run.beside = await besidePhases();
  if (opts['vs-only']) {
    run.load.end = os.loadavg()[0]!;
    const file = path.join(BENCH_DIR, 'results', `${stamp}-vs.json`);
    const { empty: _empty, backlogs: _backlogs, ...only } = run;
    writeFileSync(file, `${JSON.stringify({ ...only, verdicts: besideVerdicts(run.beside!) }, null, 2)}\n`);
    header();
    console.log(renderBeside(run.beside!));
    console.log(`\nwritten: ${path.relative(process.cwd(), file)}`);
    return;
  }
  if (phases.has('empty')) {
    const peer = peers.includes('bullmq') ? await startBullmq() : undefined;
    try {
      Object.assign(run, await emptyPhases(peer));
    } finally {
      await peer?.stop();
    }
  }
  if (phases.has('floor')) run.floor = await floorPhases();
  if (phases.has('schedules')) run.schedules = await schedulePhase();
  if (phases.has('backlog')) for (const size of sizes) run.backlogs.push(await backlogPhases(size));
  const prio: PrioRun = {};
  if (phases.has('priority')) prio.priority = await priorityPhases();
  if (phases.has('backlog-prio')) prio.backlogPrio = await backlogPrioPhases();
  if (opts['cpu-prof']) run.profile = await profilePhase(stamp);
  run.load.end = os.loadavg()[0]!;

  // The table and the targets read the empty-queue phases: without them, only the §8.1 section.
  const full = phases.has('empty');
  const file = path.join(BENCH_DIR, 'results', `${stamp}.json`);
  // The targets against RabbitMQ are among verdicts(run); without the empty-queue phases they go alone.
  const besideTargets = !full && run.beside ? besideVerdicts(run.beside).map((v) => ({ target: v.target, measured: `${v.ratio.toFixed(2)}× (${v.ratios.map((x) => x.toFixed(2)).join(', ')})`, pass: v.pass })) : [];
  writeFileSync(file, `${JSON.stringify({ ...run, prio, verdicts: [...(full ? verdicts(run) : besideTargets), ...prioVerdicts(prio)] }, null, 2)}\n`);
  header();
  if (full) console.log(renderTable(run));
  if (run.schedules) console.log(`\n${chalk.bold('Schedules on an idle server')}: ${describeSchedules(run.schedules)}`);
  if (prio.priority || prio.backlogPrio) console.log(`\n${renderPrio(prio)}`);
  if (run.beside) console.log(`\n${renderBeside(run.beside)}`);
  if (run.profile) console.log(`\n${chalk.bold('Server CPU profile over a full-cycle phase')} (${run.profile.file})\n${run.profile.top}`);
  console.log(`\nwritten: ${path.relative(process.cwd(), file)}`);
}

try {
  await main();
} catch (err) {
  console.error(chalk.red(`bench failed: ${(err as Error).message}`));
  process.exitCode = 1;
} finally {
  cleanup();
}
