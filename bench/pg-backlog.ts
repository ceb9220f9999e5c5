/**
 * One svcq node (or `--nodes N` on one database) on PostgreSQL with a large database against the
 * same on an empty database run right beside it: posts and claims with N items waiting in the
 * queue worked, with N waiting in another queue of the same database, and with N finished items
 * kept by retention in the queue worked.
 *
 *   node --import tsx bench/pg-backlog.ts --store postgres://USER@HOST:PORT/DB [options]
 *
 *   --items 1000000   items loaded (batch posts of 1,000, 4 in flight; then drained by claims of
 *                     100 with hand-ins for the finished stage)
 *   --rounds 3        paired rounds per phase and stage (the order of the sides alternates)
 *   --jobs 8000       jobs per full-cycle phase (`cycle`, `handin`; 32 producers and 32 workers)
 *   --seconds 3       length of the `post` phase (32 in flight)
 *   --stages same,other,finished   (or `prio`, alone: see below)
 *   --nodes 1         svcq nodes per side, on that side's database: the load generator's
 *                     connections spread over them, and the svcq CPU per job is theirs together
 *   --prefix svcq_backlog   the two databases are <prefix>_big_<pid> and <prefix>_empty_<pid>,
 *                     made on the server of --store and dropped at the end
 *
 * Each stage ends with a VACUUM ANALYZE of both databases after the bulk load (as autovacuum would
 * after a bulk load; run it with or without autovacuum on the server). Figures per phase: the rate
 * of each side, svcq CPU per job (/proc of the node) and database CPU per job (/proc of the
 * backends serving that database: this machine's PostgreSQL), and the median of the per-round
 * ratios big / empty. After the phases of a stage it times 200 `GET /api/v2/queues` and 200 status
 * reads (`GET /<queue>/items/<id>`) on each side, one at a time.
 *
 * Stage `prio` (decisions §8.1; `npm run bench -- --store URL --phases backlog-prio` runs it): the
 * queue is filled with a tenth of --items delayed by a year, then --items claimable items (each
 * batch of 1,000 with a random priority of 10, so the delayed items come first in claim order);
 * then posts, the full cycle and claim → result
 * (`claim`: --jobs claims, 32 in flight, each followed by the item's result) with a random priority
 * on every post, on both sides; before each claim phase the empty side's queue is given as many
 * items as its claims take (beside what its post phases left there).
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { COLUMNS } from '../src/store/postgres/pg-tx.js';
import { NOT_PAUSED } from '../src/store/postgres/pg-claims.js';
import { backendCpuSeconds, databaseUrl, query } from './pg-admin.js';
import { cpuMsOf, killAll, runLoad, startSvcq, type Svcq } from './procs.js';
import type { LoadMode, LoadSpec } from './protocol.js';

const { values: opts } = parseArgs({
  options: {
    store: { type: 'string' },
    items: { type: 'string', default: '1000000' },
    rounds: { type: 'string', default: '3' },
    jobs: { type: 'string', default: '8000' },
    seconds: { type: 'string', default: '3' },
    stages: { type: 'string', default: 'same,other,finished' },
    prefix: { type: 'string', default: 'svcq_backlog' },
    nodes: { type: 'string', default: '1' },
  },
  strict: true,
});
if (!opts.store || !/^postgres(ql)?:\/\//.test(opts.store)) {
  console.error('pg-backlog: give --store postgres://USER@HOST:PORT/DB');
  process.exit(2);
}
const ITEMS = Number(opts.items);
const ROUNDS = Number(opts.rounds);
const JOBS = Number(opts.jobs);
const SECONDS = Number(opts.seconds);
const NODES = Number(opts.nodes);
if (!Number.isInteger(NODES) || NODES < 1) {
  console.error('pg-backlog: --nodes takes a whole number of 1 or more');
  process.exit(2);
}
/** Stage `prio`: priority levels of every post, and a delay no item outlives during the run. */
const PRIO_LEVELS = 10;
const FAR_DELAY_S = 31_536_000;
const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const QUEUE_DEF = JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } });

const dbUrl = (name: string): string => databaseUrl(opts.store!, name);
const sql = <T = Record<string, unknown>>(database: string, text: string): Promise<T[]> => query<T>(opts.store!, database, text);

/** CPU milliseconds of each backend serving `database`. */
async function backendCpu(database: string): Promise<Map<number, number>> {
  return new Map([...(await backendCpuSeconds(opts.store!, database))].map(([pid, s]) => [pid, s * 1000]));
}

interface Side {
  name: 'big' | 'empty';
  database: string;
  /** The side's nodes; requests other than the load go to the first. */
  nodes: Svcq[];
  roots: string[];
}

function call(s: Side, method: string, p: string, body: string, auth = false): Promise<{ status: number; body: string }> {
  const base = new URL(s.nodes[0]!.url);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { host: HOST, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) };
    if (auth) headers.authorization = `Bearer ${MASTER}`;
    const req = http.request({ host: '127.0.0.1', port: Number(base.port), method, path: p, headers }, (res) => {
      let out = '';
      res.on('data', (c: Buffer) => (out += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: out }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function define(s: Side, queue: string): Promise<void> {
  const r = await call(s, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/${queue}.json`, QUEUE_DEF, true);
  if (r.status !== 200) throw new Error(`define ${queue} on ${s.name}: ${r.status} ${r.body}`);
  // A definition is live on every node within 1 s (decisions §6.1).
  if (s.nodes.length > 1) await new Promise((resolve) => setTimeout(resolve, 1200));
}

interface Figure {
  rate: number;
  svcqUs: number;
  dbUs: number;
}

async function phase(s: Side, mode: LoadMode, queue: string, extra: Partial<LoadSpec>): Promise<Figure> {
  const seen = new Map<number, number>();
  const first = await backendCpu(s.database);
  let running = true;
  const follow = (async () => {
    while (running) {
      for (const [pid, cpu] of await backendCpu(s.database).catch(() => new Map<number, number>())) seen.set(pid, cpu);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const nodesCpu = (): number => s.nodes.reduce((sum, n) => sum + cpuMsOf(n.pid), 0);
  const cpu0 = nodesCpu();
  const urls = s.nodes.map((n) => n.url);
  const r = await runLoad({ mode, url: urls[0]!, urls: urls.length > 1 ? urls : undefined, host: HOST, queue, inFlight: 32, durationMs: SECONDS * 1000, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 190, recordLatency: false, ...extra }, 600_000);
  const svcq = nodesCpu() - cpu0;
  running = false;
  await follow;
  for (const [pid, cpu] of await backendCpu(s.database)) seen.set(pid, cpu);
  let db = 0;
  for (const [pid, cpu] of seen) db += cpu - (first.get(pid) ?? 0);
  if (r.errors > 0) throw new Error(`${s.name} ${mode} on ${queue}: ${r.errors} errors, the first: ${r.firstError}`);
  const n = Math.max(1, r.count);
  return { rate: r.rate, svcqUs: (svcq * 1000) / n, dbUs: (db * 1000) / n };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

async function timeRequests(s: Side, p: string, auth: boolean, n = 200): Promise<{ p50: number; p99: number }> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await call(s, 'GET', p, '', auth);
    ms.push(performance.now() - t);
    if (r.status !== 200) throw new Error(`GET ${p} on ${s.name}: ${r.status} ${r.body}`);
  }
  ms.sort((a, b) => a - b);
  return { p50: ms[Math.floor(n * 0.5)]!, p99: ms[Math.floor(n * 0.99)]! };
}

/**
 * PostgreSQL's plan for one claim on the queue `backlog` of `database`: the statement `svcq_claim`
 * of src/store/postgres/pg-claims.ts (its text repeated here: keep the two alike), prepared and
 * planned as the store plans it (`ordered`: a generic plan, sequential scans and sorts off), run
 * under EXPLAIN (ANALYZE, BUFFERS) for the first claim of a page (LIMIT 1) in a transaction rolled
 * back, so the row it locks stays pending.
 */
async function explainClaim(database: string): Promise<string> {
  const client = new pg.Client({ connectionString: dbUrl(database) });
  await client.connect();
  try {
    const [queue] = (await client.query<{ key: string }>(`SELECT key FROM svcq_queues WHERE key LIKE '%backlog%'`)).rows;
    if (!queue) throw new Error(`no queue backlog in ${database}`);
    await client.query('BEGIN');
    await client.query('SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off');
    await client.query(`PREPARE bench_claim AS SELECT ${COLUMNS} FROM svcq_items
        WHERE queue = $1 AND status = 'pending' AND available_at = 0 AND ((-priority), ord) > ($2::integer, $3) AND ${NOT_PAUSED}
        ORDER BY (-priority), ord LIMIT $4 FOR UPDATE SKIP LOCKED`);
    const rows = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE bench_claim('${queue.key.replace(/'/g, "''")}', -1000, -1, 1)`)).rows;
    await client.query('ROLLBACK');
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    await client.end();
  }
}

async function vacuum(database: string): Promise<number> {
  const t = performance.now();
  await sql(database, 'VACUUM ANALYZE');
  return performance.now() - t;
}

const stamp = `${process.pid}`;
const sides: Side[] = [];
const t00 = performance.now();
const log = (line: string): void => console.log(`[${((performance.now() - t00) / 1000).toFixed(0).padStart(5)} s] ${line}`);
try {
  for (const name of ['big', 'empty'] as const) {
    const database = `${opts.prefix}_${name}_${stamp}`;
    await sql('postgres', `CREATE DATABASE ${database}`);
    const side: Side = { name, database, nodes: [], roots: [] };
    sides.push(side);
    process.env.SVCQ_STORE = dbUrl(database);
    // One after the other: the first creates the schema.
    for (let n = 0; n < NODES; n++) {
      const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-pg-backlog-'));
      side.roots.push(root);
      side.nodes.push(await startSvcq({ root, masterToken: MASTER }));
    }
    delete process.env.SVCQ_STORE;
  }
  const [big, empty] = sides as [Side, Side];
  for (const s of sides) {
    for (const q of ['backlog', 'warm']) await define(s, q);
    await phase(s, 'handin', 'warm', { maxCount: 2000, durationMs: 120_000 });
  }
  log(`svcq on PostgreSQL${NODES > 1 ? `, ${NODES} nodes per database` : ''}, ${ITEMS.toLocaleString('en')} items, ${ROUNDS} paired rounds, ${JOBS} jobs per cycle, post ${SECONDS} s, load ${os.loadavg()[0]!.toFixed(2)}`);

  let loaded = false;
  for (const stage of opts.stages!.split(',')) {
    const prio = stage === 'prio' ? { priorities: PRIO_LEVELS } : {};
    if (stage === 'prio') {
      if (loaded) throw new Error('pg-backlog: the stage prio fills the queue its own way: run it alone (--stages prio)');
      const t = performance.now();
      // The delayed items first: they come ahead of every claimable one of their priority in `ord`.
      for (const [items, extra] of [[ITEMS / 10, { ...prio, delayS: FAR_DELAY_S }], [ITEMS, prio]] as const) {
        const r = await runLoad({ mode: 'batch-post', url: big.nodes[0]!.url, host: HOST, queue: 'backlog', inFlight: 4, durationMs: 3_600_000, maxCount: Math.ceil(items / 1000), itemBytes: 190, recordLatency: false, ...extra }, 3_700_000);
        if (r.errors > 0) throw new Error(`fill: ${r.errors} errors, the first: ${r.firstError}`);
      }
      log(`filled 'backlog' on big with ${ITEMS} items across ${PRIO_LEVELS} priorities and ${ITEMS / 10} delayed by ${FAR_DELAY_S} s in ${((performance.now() - t) / 1000).toFixed(1)} s`);
      loaded = true;
    }
    if (!loaded) {
      const t = performance.now();
      const r = await runLoad({ mode: 'batch-post', url: big.nodes[0]!.url, host: HOST, queue: 'backlog', inFlight: 4, durationMs: 3_600_000, maxCount: Math.ceil(ITEMS / 1000), itemBytes: 190, recordLatency: false }, 3_700_000);
      if (r.errors > 0) throw new Error(`fill: ${r.errors} errors, the first: ${r.firstError}`);
      log(`filled 'backlog' on big with ${r.count} items in ${((performance.now() - t) / 1000).toFixed(1)} s (${r.rate.toFixed(0)} items/s)`);
      loaded = true;
    }
    if (stage === 'finished') {
      for (const s of sides) {
        const t = performance.now();
        const r = await runLoad({ mode: 'drain-batch', url: s.nodes[0]!.url, host: HOST, queue: 'backlog', inFlight: 4, durationMs: 3_600_000, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 190, recordLatency: false }, 3_700_000);
        log(`drained 'backlog' on ${s.name}: ${r.count} items finished in ${((performance.now() - t) / 1000).toFixed(1)} s`);
      }
    }
    for (const s of sides) log(`VACUUM ANALYZE ${s.name}: ${((await vacuum(s.database)) / 1000).toFixed(1)} s`);
    const [counts] = await sql<{ pending: string; finished: string; total: string }>(
      big.database,
      `SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'finished') AS finished, count(*) AS total FROM svcq_items`,
    );
    log(`stage ${stage}: big database holds ${counts!.total} items (${counts!.pending} pending, ${counts!.finished} finished)`);
    if (stage === 'prio') log(`the claim's plan on big (svcq_claim, LIMIT 1), before the phases:\n${await explainClaim(big.database)}`);
    for (const kind of stage === 'prio' ? (['post', 'cycle', 'claim'] as const) : (['post', 'cycle', 'handin'] as const)) {
      const mode: LoadMode = kind === 'claim' ? 'drain' : kind;
      const pairs: Array<[Figure, Figure]> = [];
      for (let r = 0; r < ROUNDS; r++) {
        const queue = stage === 'other' ? `o-${mode}-${r}` : 'backlog';
        if (stage === 'other') for (const s of sides) await define(s, queue);
        else if (r === 0 && (stage === 'same' || stage === 'prio')) await define(empty, queue);
        // The empty side's claims take items put there for them, as many as they claim (beside the few
        // its post phases left).
        if (kind === 'claim') await runLoad({ mode: 'batch-post', url: empty.nodes[0]!.url, host: HOST, queue, inFlight: 4, durationMs: 300_000, maxCount: Math.ceil(JOBS / 1000), itemBytes: 190, recordLatency: false, ...prio });
        const order = r % 2 === 0 ? [big, empty] : [empty, big];
        const got = new Map<string, Figure>();
        for (const s of order) got.set(s.name, await phase(s, mode, queue, { ...(mode === 'post' ? {} : { maxCount: JOBS, durationMs: 300_000 }), ...prio }));
        const b = got.get('big')!;
        const e = got.get('empty')!;
        pairs.push([b, e]);
        log(`${stage.padEnd(8)} ${kind.padEnd(6)} round ${r + 1}: big ${b.rate.toFixed(0)}/s (svcq ${b.svcqUs.toFixed(0)} µs, db ${b.dbUs.toFixed(0)} µs per job)  empty ${e.rate.toFixed(0)}/s (svcq ${e.svcqUs.toFixed(0)} µs, db ${e.dbUs.toFixed(0)} µs)  ratio ${(b.rate / e.rate).toFixed(3)}`);
      }
      log(
        `${stage.padEnd(8)} ${kind.padEnd(6)} MEDIAN ratio ${median(pairs.map(([b, e]) => b.rate / e.rate)).toFixed(3)} (${pairs.map(([b, e]) => (b.rate / e.rate).toFixed(3)).join(', ')}); ` +
          `svcq µs/job big ${median(pairs.map(([b]) => b.svcqUs)).toFixed(0)} empty ${median(pairs.map(([, e]) => e.svcqUs)).toFixed(0)}; ` +
          `db µs/job big ${median(pairs.map(([b]) => b.dbUs)).toFixed(0)} empty ${median(pairs.map(([, e]) => e.dbUs)).toFixed(0)}`,
      );
    }
    if (stage === 'prio') log(`the claim's plan on big after the phases:\n${await explainClaim(big.database)}`);
    for (const s of sides) {
      const posted = await call(s, 'POST', `/backlog`, '{"probe":true}');
      const id = (JSON.parse(posted.body) as { id: string }).id;
      const queues = await timeRequests(s, '/api/v2/queues', true);
      const status = await timeRequests(s, `/backlog/items/${id}`, false);
      log(`${stage.padEnd(8)} ${s.name.padEnd(5)} GET /api/v2/queues p50 ${queues.p50.toFixed(2)} ms p99 ${queues.p99.toFixed(2)} ms; status read p50 ${status.p50.toFixed(2)} ms p99 ${status.p99.toFixed(2)} ms`);
    }
  }
} finally {
  for (const s of sides) {
    for (const node of s.nodes) await node.stop().catch((err: Error) => console.error(err.message));
    for (const root of s.roots) rmSync(root, { recursive: true, force: true });
  }
  killAll();
  for (const s of sides) await sql('postgres', `DROP DATABASE IF EXISTS ${s.database} WITH (FORCE)`).catch((err: Error) => console.error(err.message));
}
