/**
 * `npm run bench:flow -- [--store postgres://USER@HOST:PORT/DB] [options]`: what flow control
 * (decisions §8.5) costs, each figure a ratio against the same work without it in the same run.
 *
 *   --phases fairness,limits,rate   which of the three to run (all by default)
 *   --items 1000000                 items in each backlog of the fairness phase
 *   --groups 10000                  groups they are spread over (the first holds half the items)
 *   --rounds 3                      paired slices (fairness) or cycles (limits) per side
 *   --seconds 3                     seconds per drain slice (fairness)
 *   --drain-connections 8           connections draining each queue in the fairness phase (each claims one item, then posts its result)
 *   --buffers                       PostgreSQL: each fairness side's cost to the buffer pool and the WAL, read after 11 s of quiet (below)
 *   --statements                    PostgreSQL with pg_stat_statements loaded: each fairness side's statements per claim (below)
 *   --jobs 4000                     jobs per full cycle (limits)
 *   --nodes 1                       servers on the database (PostgreSQL only; 3 for the multi-node figures)
 *   --rate-seconds 30               length of the rate-limit accuracy run
 *   --rate-max 1000                 its rateLimit max per second (lower it where the machine cannot lease 1,000 a second)
 *   --rate-batch                    the rate drain claims up to 100 items a claim, handing results in with the next (decisions §3.8)
 *   --rate-workers 12               connections draining in the rate run, spread over the nodes (each claims, then hands its result in)
 *   --cpu-prof DIR                  profile the servers (written to DIR when they stop); the fairness phase logs each
 *                                   slice's window in the first node's profile (for bench/profile-summary.ts)
 *
 * - fairness: two queues of --items items each over --groups groups, one with `fairness: "groups"`,
 *   one plain FIFO. First 10,000 claims from the fair queue (100 at a time): how many groups they
 *   reach. Then drain slices (claim and result, --drain-connections connections) taking turns between the two queues:
 *   the ratio of the fair queue's rate to the FIFO queue's, per round. With --buffers (PostgreSQL),
 *   also what each side cost the server's buffer pool and WAL per claim and result (blocks read in,
 *   dirty blocks a backend wrote out to make room, full-page images, WAL bytes: server-wide
 *   counters). A backend hands its counts in at most once a second while busy, and 10 s after it
 *   goes idle: each side's are read after 11 s of quiet, or up to a second of one side's would be
 *   counted in the next. With --statements, the statements each side ran (pg_stat_statements, reset
 *   before each slice; the server must load it: shared_preload_libraries), per claim and result:
 *   calls and time, all of them, the ten that took longest and the ten called most often (BEGIN
 *   and COMMIT among them: transactions per claim).
 * - limits: full cycles (post, claim, result) on a queue with `maxActive` and `rateLimit` set too
 *   high to bind, and on one without, taking turns (after a warm-up of --jobs/4 on each): ratios
 *   of rate and of server CPU per job.
 * - rate: `rateLimit { max: --rate-max, perSeconds: 1 }`, 40,000 items, --rate-seconds of drain from
 *   every node: how many leased, against perSeconds·max, and (PostgreSQL: from the task events)
 *   the most claims in any window of one second.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { backendCpuSeconds, bufferCounters, freshDatabase, query, type BufferCounters } from './pg-admin.js';
import { Pool } from 'undici';
import { killAll, runLoad, startSvcq, type Svcq } from './procs.js';
import type { LoadResult, LoadSpec } from './protocol.js';

const { values: opts } = parseArgs({
  options: {
    store: { type: 'string' },
    phases: { type: 'string', default: 'fairness,limits,rate' },
    items: { type: 'string', default: '1000000' },
    groups: { type: 'string', default: '10000' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '3' },
    jobs: { type: 'string', default: '4000' },
    nodes: { type: 'string', default: '1' },
    'rate-seconds': { type: 'string', default: '30' },
    'rate-max': { type: 'string', default: '1000' },
    'rate-batch': { type: 'boolean', default: false },
    'rate-workers': { type: 'string', default: '12' },
    'drain-connections': { type: 'string', default: '8' },
    buffers: { type: 'boolean', default: false },
    statements: { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
  },
});
const ITEMS = Number(opts.items);
const GROUPS = Number(opts.groups);
const ROUNDS = Number(opts.rounds);
const SECONDS = Number(opts.seconds);
const JOBS = Number(opts.jobs);
const NODES = opts.store ? Number(opts.nodes) : 1;
const RATE_SECONDS = Number(opts['rate-seconds']);
const RATE_MAX = Number(opts['rate-max']);
const RATE_BATCH = opts['rate-batch'];
const RATE_WORKERS = Number(opts['rate-workers']);
const DRAIN_CONNECTIONS = Number(opts['drain-connections']);
const phases = new Set(opts.phases.split(','));
const HOST = 'flow.bench';
const MASTER = 'master-flow-bench-0123456789abcdef';
const t00 = performance.now();
const log = (line: string): void => console.log(`[${((performance.now() - t00) / 1000).toFixed(0).padStart(5)} s] ${line}`);

const roots: string[] = [];
/** When the first node was started: a profile's times (--cpu-prof) count from about then. */
let firstNodeAt = 0;
const nodes: Svcq[] = [];
let database: { url: string; drop: () => Promise<void> } | undefined;

async function startNodes(): Promise<void> {
  if (opts.store) {
    database = await freshDatabase(opts.store, 'svcq_flow');
    process.env.SVCQ_STORE = database.url;
  }
  for (let n = 0; n < NODES; n++) {
    const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-flow-bench-'));
    roots.push(root);
    if (n === 0) firstNodeAt = performance.now();
    nodes.push(await startSvcq({ root, masterToken: MASTER, nodeArgs: opts['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', opts['cpu-prof']] : [] }));
  }
  delete process.env.SVCQ_STORE;
}

const pools = new Map<string, Pool>();
async function request(url: string, method: string, pathAndQuery: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown> & { error?: string; empty?: boolean; items?: unknown } }> {
  let pool = pools.get(url);
  if (!pool) pools.set(url, (pool = new Pool(url, { connections: 16 })));
  const res = await pool.request({ path: pathAndQuery, method: method as 'GET', headers: { host: HOST, 'content-type': 'application/json', ...headers }, body });
  const text = await res.body.text();
  return { status: res.statusCode, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function define(name: string, def: Record<string, unknown>): Promise<void> {
  const body = JSON.stringify({ access: { post: 'public', fetch: 'public', work: 'public' }, leaseSeconds: 3600, ...def });
  const r = await request(nodes[0]!.url, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/${name}.json`, body, { authorization: `Bearer ${MASTER}`, host: 'localhost' });
  if (r.status !== 200) throw new Error(`defining ${name}: ${r.status} ${JSON.stringify(r.json)}`);
  // Every node serves it before any load starts.
  for (const n of nodes) {
    for (let i = 0; (await request(n.url, 'GET', `/${name}/items/ffffffffffffffff`)).json.error === 'not found'; i++) {
      if (i > 200) throw new Error(`${name} not served by ${n.url}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/** Adds a batch of the big group (group 0) of at most 1,000 items; returns its size. */
function bigBatch(batches: Array<{ group: number; n: number }>, left: number): number {
  const n = Math.min(1000, left);
  batches.push({ group: 0, n });
  return n;
}

/** Fills `queue` with ITEMS items over GROUPS groups: group 0 holds half, in batches of 1,000 taking turns with the other groups' batches. */
async function fill(queue: string): Promise<number> {
  const t = performance.now();
  const batches: Array<{ group: number; n: number }> = [];
  const big = Math.floor(ITEMS / 2);
  const rest = ITEMS - big;
  const small: Array<{ group: number; n: number }> = [];
  for (let g = 1; g < GROUPS; g++) small.push({ group: g, n: Math.floor(rest / (GROUPS - 1)) + (g - 1 < rest % (GROUPS - 1) ? 1 : 0) });
  const bigBatches = Math.ceil(big / 1000);
  const every = Math.max(1, Math.floor(small.length / Math.max(1, bigBatches)));
  let bigLeft = big;
  for (let i = 0; i < small.length; i++) {
    if (small[i]!.n > 0) batches.push(small[i]!);
    if (i % every === 0 && bigLeft > 0) bigLeft -= bigBatch(batches, bigLeft);
  }
  while (bigLeft > 0) bigLeft -= bigBatch(batches, bigLeft);
  let next = 0;
  let seq = 0;
  const loop = async (): Promise<void> => {
    while (next < batches.length) {
      const b = batches[next++]!;
      const body = `[${Array.from({ length: b.n }, () => `{"g":${b.group},"seq":${seq++},"pad":"${'x'.repeat(100)}"}`).join(',')}]`;
      const r = await request(nodes[next % nodes.length]!.url, 'POST', `/${queue}/batch?group=g${b.group}`, body);
      if (r.status !== 200) throw new Error(`batch to ${queue}: ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
    }
  };
  await Promise.all(Array.from({ length: 4 }, loop));
  return performance.now() - t;
}

const ratio = (xs: number[]): string => {
  const s = [...xs].sort((a, b) => a - b);
  return `${s[Math.floor(s.length / 2)]!.toFixed(3)} (${s.map((x) => x.toFixed(3)).join(', ')})`;
};

function spec(mode: LoadSpec['mode'], queue: string, extra: Partial<LoadSpec>): LoadSpec {
  return { mode, url: nodes[0]!.url, urls: nodes.map((n) => n.url), host: HOST, queue, inFlight: 8, durationMs: SECONDS * 1000, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 200, recordLatency: false, ...extra };
}

const cpuAll = (): number => nodes.reduce((sum, n) => sum + n.cpuMs(), 0);
/** CPU seconds used so far by each backend of the database (PostgreSQL on this machine); none on the embedded store. */
async function databaseCpu(): Promise<Map<number, number>> {
  if (!database || !opts.store) return new Map();
  return backendCpuSeconds(opts.store, new URL(database.url).pathname.slice(1));
}
/** CPU ms the backends used between two samples (a backend started in between: all of its own; one ended in between is missed). */
function cpuBetween(from: Map<number, number>, to: Map<number, number>): number {
  let ms = 0;
  for (const [pid, s] of to) ms += (s - (from.get(pid) ?? 0)) * 1000;
  return ms;
}
/** How long the counters are left to settle after a side: PostgreSQL's idle backends hand in what they counted after 10 s (PGSTAT_IDLE_INTERVAL). */
const STATS_SETTLE_MS = 11_000;
/** The server's buffer and WAL counters (PostgreSQL, with --buffers). */
async function buffers(): Promise<BufferCounters | undefined> {
  if (!database || !opts.store || !opts.buffers) return undefined;
  return bufferCounters(opts.store, new URL(database.url).pathname.slice(1));
}
/** Per side of the fairness phase: the counters' growth over its drain slices, and the claims they made. */
const bufferTotals = new Map<string, BufferCounters & { claims: number }>();
function addBuffers(side: string, from: BufferCounters, to: BufferCounters, claims: number): void {
  let t = bufferTotals.get(side);
  if (!t) bufferTotals.set(side, (t = { read: 0, hit: 0, backendWrites: 0, fullPages: 0, walBytes: 0, claims: 0 }));
  for (const k of ['read', 'hit', 'backendWrites', 'fullPages', 'walBytes'] as const) t[k] += to[k] - from[k];
  t.claims += claims;
}
/** Per side of the fairness phase (--statements): each statement's calls and time over its slices, and the claims they made. */
const statementTotals = new Map<string, { claims: number; byQuery: Map<string, { calls: number; ms: number }> }>();
const databaseName = (): string => new URL(database!.url).pathname.slice(1);
/** Starts pg_stat_statements' counts afresh (the whole server's: nothing else runs). */
async function resetStatements(): Promise<boolean> {
  if (!database || !opts.store || !opts.statements) return false;
  await query(opts.store, databaseName(), 'SELECT pg_stat_statements_reset()');
  return true;
}
async function addStatements(side: string, claims: number): Promise<void> {
  const rows = await query<{ query: string; calls: string; ms: number }>(
    opts.store!,
    databaseName(),
    `SELECT s.query, s.calls::text AS calls, s.total_exec_time AS ms FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'`,
  );
  let t = statementTotals.get(side);
  if (!t) statementTotals.set(side, (t = { claims: 0, byQuery: new Map() }));
  t.claims += claims;
  for (const r of rows) {
    const key = r.query.replace(/\s+/g, ' ').trim();
    const q = t.byQuery.get(key) ?? { calls: 0, ms: 0 };
    q.calls += Number(r.calls);
    q.ms += r.ms;
    t.byQuery.set(key, q);
  }
}
function printStatements(): void {
  for (const [side, t] of statementTotals) {
    const all = [...t.byQuery.values()].reduce((a, q) => ({ calls: a.calls + q.calls, ms: a.ms + q.ms }), { calls: 0, ms: 0 });
    log(`  ${side}, statements per claim and result: ${(all.calls / t.claims).toFixed(2)} calls, ${((all.ms * 1000) / t.claims).toFixed(0)} µs (${t.claims.toLocaleString('en')} claims)`);
    /** The ten first statements by `key`, a line each. */
    const ten = (key: (q: { calls: number; ms: number }) => number): void => {
      for (const [text, q] of [...t.byQuery].sort((a, b) => key(b[1]) - key(a[1])).slice(0, 10)) log(`    ${(q.calls / t.claims).toFixed(3).padStart(7)} calls ${((q.ms * 1000) / t.claims).toFixed(1).padStart(7)} µs  ${text.slice(0, 110)}`);
    };
    ten((q) => q.ms);
    log(`  ${side}, the ten called most often:`);
    ten((q) => q.calls);
  }
}
/** What the last {@link timed} run cost the database's backends, in CPU ms. */
let lastDatabaseCpuMs = 0;
async function timed(s: LoadSpec): Promise<LoadResult> {
  const c = cpuAll();
  const d = await databaseCpu();
  const r = await runLoad(s);
  r.serverCpuMs = cpuAll() - c;
  lastDatabaseCpuMs = cpuBetween(d, await databaseCpu());
  if (r.errors > 0) throw new Error(`${s.mode} on ${s.queue}: ${r.errors} errors, the first: ${r.firstError}`);
  return r;
}

async function fairnessPhase(): Promise<void> {
  if (opts.statements && database && opts.store) await query(opts.store, databaseName(), 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await define('fair', { fairness: 'groups' });
  await define('fifo', {});
  log(`fairness: filling two queues of ${ITEMS.toLocaleString('en')} items over ${GROUPS.toLocaleString('en')} groups (the first holds half)`);
  log(`  fair filled in ${((await fill('fair')) / 1000).toFixed(1)} s; fifo in ${((await fill('fifo')) / 1000).toFixed(1)} s`);
  const reached = new Set<number>();
  let claimed = 0;
  const firstAt = performance.now();
  while (claimed < 10_000) {
    let r = await request(nodes[claimed % nodes.length]!.url, 'POST', '/fair/claim', JSON.stringify({ worker: 'turns', max: 100 }));
    // A claim that finds the store slow (a 503: nothing was changed) is tried again, and said.
    for (let tries = 1; r.status === 503 && tries < 5; tries++) {
      log(`  a claim was answered 503 (${String(r.json.error)}); trying again`);
      r = await request(nodes[claimed % nodes.length]!.url, 'POST', '/fair/claim', JSON.stringify({ worker: 'turns', max: 100 }));
    }
    const items = (r.json.items ?? [r.json]) as unknown as Array<{ item: { g: number } }>;
    if (r.status !== 200 || r.json.empty) throw new Error(`claim: ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
    for (const it of items) reached.add(it.item.g);
    claimed += items.length;
  }
  log(`fairness: the first ${claimed.toLocaleString('en')} claims from the fair queue (in ${((performance.now() - firstAt) / 1000).toFixed(1)} s) reached ${reached.size.toLocaleString('en')} of ${GROUPS.toLocaleString('en')} groups`);
  const ratios: number[] = [];
  // A warm-up slice of each first (not counted), and the two sides in turn first: the first slice
  // on a fresh server measured its start (code not yet optimised) on whichever side came first.
  for (const q of ['fair', 'fifo']) await timed(spec('drain', q, { durationMs: 1000, inFlight: DRAIN_CONNECTIONS }));
  for (let round = 0; round < ROUNDS; round++) {
    const side = async (q: string): Promise<{ r: LoadResult; db: number }> => {
      const before = await buffers();
      const counting = await resetStatements();
      const from = performance.now() - firstNodeAt;
      const r = await timed(spec('drain', q, { inFlight: DRAIN_CONNECTIONS }));
      // The slice's window in the first node's profile, for bench/profile-summary.ts.
      if (opts['cpu-prof']) log(`  ${q} slice: profile window ${from.toFixed(0)} ${(performance.now() - firstNodeAt).toFixed(0)} ms`);
      const db = lastDatabaseCpuMs;
      if (counting) await addStatements(q, r.count);
      if (before) await new Promise((done) => setTimeout(done, STATS_SETTLE_MS));
      const after = await buffers();
      if (before && after) addBuffers(q, before, after, r.count);
      return { r, db };
    };
    let f: { r: LoadResult; db: number };
    let p: { r: LoadResult; db: number };
    if (round % 2 === 0) {
      f = await side('fair');
      p = await side('fifo');
    } else {
      p = await side('fifo');
      f = await side('fair');
    }
    const { r: fair, db: fairDb } = f;
    const { r: fifo, db: fifoDb } = p;
    ratios.push(fair.rate / fifo.rate);
    const perClaim = (ms: number, r: LoadResult): string => `${((ms * 1000) / Math.max(1, r.count)).toFixed(0)} µs`;
    const cpu = (r: LoadResult, db: number): string => `server ${perClaim(r.serverCpuMs!, r)}${database ? `, database ${perClaim(db, r)}` : ''} CPU per claim`;
    log(`  round ${round + 1}: fair ${fair.rate.toFixed(0)}/s (${cpu(fair, fairDb)}), fifo ${fifo.rate.toFixed(0)}/s (${cpu(fifo, fifoDb)}) (claim and result, ${DRAIN_CONNECTIONS} connections)`);
  }
  for (const [q, b] of bufferTotals) {
    const per = (x: number, digits = 2): string => (x / b.claims).toFixed(digits);
    log(`  ${q}, per claim and result: ${per(b.read)} blocks read into the buffer pool, ${per(b.backendWrites)} dirty ones written out by a backend to make room, ${per(b.fullPages)} full-page images, ${per(b.walBytes, 0)} bytes of WAL`);
  }
  printStatements();
  log(`fairness: fair/fifo drain rate ${ratio(ratios)} (target ≥ 0.8)`);
}

async function limitsPhase(): Promise<void> {
  const rates: number[] = [];
  const cpus: number[] = [];
  // A warm-up of each side first: the first round on a fresh server measured its start (code not
  // yet optimised, connections not yet open, statements not yet prepared) on whichever side came first.
  await define('limwarm', { maxActive: 100_000, rateLimit: { max: 1_000_000, perSeconds: 1 } });
  await define('plainwarm', {});
  for (const q of ['limwarm', 'plainwarm']) await timed(spec('cycle', q, { maxCount: Math.ceil(JOBS / 4), durationMs: 120_000, inFlight: 16 }));
  for (let round = 0; round < ROUNDS; round++) {
    await define(`lim${round}`, { maxActive: 100_000, rateLimit: { max: 1_000_000, perSeconds: 1 } });
    await define(`plain${round}`, {});
    const run = (q: string): Promise<LoadResult> => timed(spec('cycle', q, { maxCount: JOBS, durationMs: 120_000, inFlight: 16 }));
    // Each round on fresh queues, the two sides in turn first.
    let lim: LoadResult;
    let b: LoadResult;
    if (round % 2 === 0) {
      lim = await run(`lim${round}`);
      b = await run(`plain${round}`);
    } else {
      b = await run(`plain${round}`);
      lim = await run(`lim${round}`);
    }
    rates.push(lim.rate / b.rate);
    cpus.push(lim.serverCpuMs! / lim.count / (b.serverCpuMs! / b.count));
    log(`  round ${round + 1}: limits ${lim.rate.toFixed(0)} jobs/s ${((lim.serverCpuMs! * 1000) / lim.count).toFixed(0)} µs CPU/job; none ${b.rate.toFixed(0)} jobs/s ${((b.serverCpuMs! * 1000) / b.count).toFixed(0)} µs CPU/job`);
  }
  log(`limits (set too high to bind) / none, ${NODES} node(s): rate ${ratio(rates)} (target ≥ 0.9), server CPU per job ${ratio(cpus)}`);
}

async function ratePhase(): Promise<void> {
  await define('rl', { rateLimit: { max: RATE_MAX, perSeconds: 1 } });
  const prefill = await runLoad(spec('batch-post', 'rl', { maxCount: 40, durationMs: 120_000, inFlight: 4 }));
  log(`rate: ${prefill.count.toLocaleString('en')} items posted; draining for ${RATE_SECONDS} s from ${NODES} node(s), ${RATE_WORKERS} connections`);
  const t0 = Date.now();
  const drained = await runLoad(spec(RATE_BATCH ? 'drain-batch' : 'drain', 'rl', { durationMs: RATE_SECONDS * 1000, inFlight: RATE_WORKERS, claimWaitS: 5 }));
  const expected = RATE_SECONDS * RATE_MAX;
  log(`rate: ${drained.count.toLocaleString('en')} leased${RATE_BATCH ? ' (claims of up to 100, results handed in with the next claim)' : ' and finished'} in ${(drained.elapsedMs / 1000).toFixed(1)} s (${((drained.count / expected - 1) * 100).toFixed(2)}% from ${expected.toLocaleString('en')})`);
  if (database) {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    const { rows } = await client.query<{ ts: string }>(`SELECT ts FROM svcq_events WHERE queue = 'rl' AND event = 'claimed' AND ts >= $1 ORDER BY ts`, [t0 - 1000]);
    await client.end();
    const ts = rows.map((r) => Number(r.ts));
    let most = 0;
    let from = 0;
    for (let to = 0; to < ts.length; to++) {
      while (ts[from]! <= ts[to]! - 1000) from++;
      most = Math.max(most, to - from + 1);
    }
    const span = ts.length > 1 ? ts[ts.length - 1]! - ts[0]! : 0;
    // The leases of the drain's RATE_SECONDS from its first claim, by the task events' own times.
    const first = ts.find((t) => t >= t0) ?? t0;
    const within = ts.filter((t) => t >= first && t < first + RATE_SECONDS * 1000).length;
    log(`rate: ${ts.length.toLocaleString('en')} claimed events over ${(span / 1000).toFixed(1)} s; the most in any 1 s window: ${most} (limit ${RATE_MAX.toLocaleString('en')})`);
    log(`rate: ${within.toLocaleString('en')} claimed in the ${RATE_SECONDS} s from the first claim (${((within / expected - 1) * 100).toFixed(2)}% from ${expected.toLocaleString('en')})`);
  }
}

try {
  await startNodes();
  log(`svcq flow bench: ${opts.store ? `PostgreSQL, ${NODES} node(s)` : 'embedded store'}; load ${os.loadavg()[0]!.toFixed(2)}`);
  if (phases.has('fairness')) await fairnessPhase();
  if (phases.has('limits')) await limitsPhase();
  if (phases.has('rate')) await ratePhase();
} finally {
  for (const p of pools.values()) await p.close();
  for (const n of nodes) await n.stop().catch(() => undefined);
  killAll();
  await database?.drop();
  for (const r of roots) rmSync(r, { recursive: true, force: true });
}
