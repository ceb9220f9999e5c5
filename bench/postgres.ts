/**
 * `npm run bench:postgres -- --store postgres://USER@HOST:PORT/DB`: one svcq node on PostgreSQL
 * against the embedded store and against pg-boss on the same PostgreSQL, with what each job costs
 * the database (commits, WAL bytes, database CPU). Every phase gets a fresh database of its own
 * (made through the server's `postgres` database, dropped after). Rounds alternate the sides, and
 * ratios are taken round by round (machines here are noisy).
 *
 *   --store URL     the PostgreSQL server to use (its database part is ignored)
 *   --jobs 20000    jobs per full-cycle phase (pg-boss: a quarter, it is much slower)
 *   --rounds 3      paired rounds
 *   --in-flight 32  producers and workers
 *   --warm-up 2000  jobs each svcq phase runs on its fresh servers before the measured ones, on a
 *                   queue of their own (0: none, the figures then include the start: a cold JIT,
 *                   statements prepared on each connection)
 *
 * Each round also runs the full cycle on three nodes on one database (the load generator's
 * connections spread over them in turn), with the svcq processes' CPU per job; after the rounds,
 * 200 cross-node wake-ups (a claim waiting on one node, the post sent to another).
 *
 * Beside them, each round runs the floor under a node on PostgreSQL (bench/floor-pg-server.ts:
 * answering posts after a shared COMMIT, no queue work) as one process and as three on one
 * database: how three processes fare against one on this machine before any queue work is done.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { backendCpuSeconds, databaseUrl as urlOf, query } from './pg-admin.js';
import { request } from 'undici';
import { performance } from 'node:perf_hooks';
import { BENCH_DIR, cpuMsOf, REPO } from './procs.js';
import { RESULT_PREFIX, type LoadMode, type LoadResult, type LoadSpec } from './protocol.js';
import type { PgBossResult, PgBossSpec } from './pgboss-load.js';

const { values: opts } = parseArgs({
  options: {
    store: { type: 'string' },
    jobs: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    'in-flight': { type: 'string', default: '32' },
    'warm-up': { type: 'string', default: '2000' },
  },
  strict: true,
});
if (!opts.store || !/^postgres(ql)?:\/\//.test(opts.store)) {
  console.error('bench:postgres: give --store postgres://USER@HOST:PORT/DB');
  process.exit(2);
}
const BASE = opts.store;
const JOBS = Number(opts.jobs);
const ROUNDS = Number(opts.rounds);
const IN_FLIGHT = Number(opts['in-flight']);
const WARM_UP = Number(opts['warm-up']);
/** Cross-node wake-ups measured, one at a time, after the rounds. */
const WAKE_SAMPLES = 200;
const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const BIN = path.join(REPO, 'bin/run.js');
const children = new Set<ChildProcess>();

const databaseUrl = (database: string): string => urlOf(BASE, database);
const admin = <T>(sql: string, database = 'postgres'): Promise<T[]> => query<T>(BASE, database, sql);

async function freshDatabase(): Promise<{ name: string; url: string; drop: () => Promise<void> }> {
  const name = `svcq_bench_${process.pid}_${Math.random().toString(16).slice(2, 10)}`;
  await admin(`CREATE DATABASE ${name}`);
  return { name, url: databaseUrl(name), drop: async () => void (await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)) };
}

const backendCpu = (database: string): Promise<Map<number, number>> => backendCpuSeconds(BASE, database);

/**
 * Follows the CPU of `database`'s backends through a phase (every 250 ms, keeping each pid's last
 * reading), so that backends which end with their client (pg-boss stops before the phase is read)
 * still count.
 */
function followCpu(database: string): { stop: () => Promise<Map<number, number>> } {
  const seen = new Map<number, number>();
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const [pid, cpu] of await backendCpu(database).catch(() => new Map<number, number>())) seen.set(pid, cpu);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      for (const [pid, cpu] of await backendCpu(database)) seen.set(pid, cpu);
      return seen;
    },
  };
}

interface DbFigures {
  commits: number;
  walBytes: number;
  /** CPU seconds by backend pid: a phase counts what its own database's backends used. */
  cpu: Map<number, number>;
}

async function dbFigures(database: string): Promise<DbFigures> {
  const [row] = await admin<{ commits: string; lsn: string }>(`SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = '${database}') AS commits, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text AS lsn`);
  return { commits: Number(row!.commits), walBytes: Number(row!.lsn), cpu: await backendCpu(database) };
}

function spawnTracked(args: string[]): ChildProcess {
  const proc = spawn(process.execPath, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  return proc;
}

async function runChild<T>(script: string, arg: unknown, timeoutMs: number): Promise<T> {
  const proc = spawnTracked(['--import', 'tsx', path.join(BENCH_DIR, script), JSON.stringify(arg)]);
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
  clearTimeout(timer);
  const at = out.indexOf(RESULT_PREFIX);
  if (code !== 0 || at < 0) throw new Error(`${script} failed (exit ${code}):\n${out.slice(-2000)}`);
  return JSON.parse(out.slice(at + RESULT_PREFIX.length, out.indexOf('\n', at))) as T;
}

/** A `svcq serve` on a temp root, on the embedded store or on `store`. */
async function startSvcq(store?: string): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-bench-pg-'));
  const proc = spawnTracked([BIN, 'serve', '--root', root, '--port', '0', '--master-token', MASTER, ...(store ? ['--store', store] : [])]);
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`svcq serve did not start:\n${out}`)), 60_000);
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => reject(new Error(`svcq serve exited with ${code}:\n${out}`)));
  });
  for (const queue of ['q', 'warm']) {
    const res = await fetch(`${url}/api/v2/def?path=${HOST}/svc-queues/${queue}.json`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${MASTER}` },
      body: JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } }),
    });
    if (res.status !== 200) throw new Error(`defining the queue ${queue} failed: ${res.status} ${await res.text()}`);
  }
  return {
    url,
    pid: proc.pid!,
    stop: async () => {
      proc.kill('SIGTERM');
      await new Promise((resolve) => (proc.exitCode !== null ? resolve(null) : proc.once('exit', resolve)));
      rmSync(root, { recursive: true, force: true });
    },
  };
}

interface Phase {
  label: string;
  rate: number;
  jobs: number;
  db?: { commitsPerJob: number; walBytesPerJob: number; cpuMsPerJob: number };
  /** CPU of the svcq processes per job (all nodes together), in ms. */
  nodeCpuMsPerJob?: number;
}

/**
 * One svcq phase (`cycle` or `handin`) on fresh servers (and a fresh database for PostgreSQL):
 * `nodes` servers on one database, the load generator's connections spread over them in turn.
 */
async function svcqPhase(mode: LoadMode, onPostgres: boolean, nodes = 1): Promise<Phase> {
  const db = onPostgres ? await freshDatabase() : undefined;
  const servers: Array<Awaited<ReturnType<typeof startSvcq>>> = [];
  try {
    // One after the other: each defines the queue (the same bytes) once it listens.
    for (let n = 0; n < nodes; n++) servers.push(await startSvcq(db?.url));
    const urls = servers.map((s) => s.url);
    const spec: LoadSpec = { mode, url: urls[0]!, urls: nodes > 1 ? urls : undefined, host: HOST, queue: 'q', inFlight: IN_FLIGHT, durationMs: 300_000, maxCount: JOBS, itemBytes: 190, recordLatency: false };
    // A node serves for hours: the measured jobs run on servers that have already run some.
    if (WARM_UP > 0) {
      const w = await runChild<LoadResult>('load.ts', { ...spec, queue: 'warm', maxCount: WARM_UP }, 360_000);
      if (w.errors > 0) throw new Error(`${mode} (warm-up): ${w.errors} errors, the first: ${w.firstError}`);
    }
    const before = db ? await dbFigures(db.name) : undefined;
    const cpu = db ? followCpu(db.name) : undefined;
    const nodeCpu = (): number => servers.reduce((sum, s) => sum + cpuMsOf(s.pid), 0);
    const nodeCpuBefore = nodeCpu();
    const r = await runChild<LoadResult>('load.ts', spec, 360_000);
    if (r.errors > 0) throw new Error(`${mode}: ${r.errors} errors, the first: ${r.firstError}`);
    const nodeCpuMsPerJob = (nodeCpu() - nodeCpuBefore) / r.count;
    const after = db ? { ...(await dbFigures(db.name)), cpu: await cpu!.stop() } : undefined;
    const label = `svcq ${mode === 'handin' ? 'full cycle with hand-ins' : 'full cycle'}, ${onPostgres ? (nodes > 1 ? `PostgreSQL, ${nodes} nodes` : 'PostgreSQL') : 'embedded'}`;
    return { label, rate: r.rate, jobs: r.count, db: before && after ? perJob(before, after, r.count) : undefined, nodeCpuMsPerJob };
  } finally {
    for (const server of servers) await server.stop();
    await db?.drop();
  }
}

/**
 * Cross-node wake (decisions §6.1): a claim waits on one node, an item is posted on another; the
 * time from sending the post to the claim's answer, `samples` times, nodes taken in turn.
 */
async function wakePhase(samples: number): Promise<{ p50: number; p99: number; max: number }> {
  const db = await freshDatabase();
  const servers: Array<Awaited<ReturnType<typeof startSvcq>>> = [];
  try {
    for (let n = 0; n < 3; n++) servers.push(await startSvcq(db.url));
    // undici's request, not fetch: fetch drops a Host header, and queues are routed by it.
    const call = async (url: string, path: string, body: string): Promise<Record<string, unknown>> => {
      const res = await request(`${url}${path}`, { method: 'POST', headers: { host: HOST, 'content-type': 'application/json' }, body });
      const json = (await res.body.json()) as Record<string, unknown>;
      if (res.statusCode !== 200 || json.ok !== true) throw new Error(`wake: POST ${path} answered ${res.statusCode} ${JSON.stringify(json)}`);
      return json;
    };
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const waiting = servers[i % 3]!;
      const posting = servers[(i + 1) % 3]!;
      let answeredAt = 0;
      const held = call(waiting.url, '/q/claim', '{"wait":10}').then((r) => ((answeredAt = performance.now()), r));
      // The claim is waiting on its node before the post goes out.
      await new Promise((r) => setTimeout(r, 20));
      const sent = performance.now();
      const posted = await call(posting.url, '/q', `{"i":${i}}`);
      const claim = await held;
      if (typeof posted.id !== 'string' || claim.id !== posted.id) throw new Error(`wake: the waiting claim got ${JSON.stringify(claim)}, not the item posted (${String(posted.id)})`);
      await call(waiting.url, `/q/items/${String(posted.id)}/result`, '{}');
      times.push(answeredAt - sent);
    }
    times.sort((a, b) => a - b);
    const at = (q: number): number => times[Math.min(times.length - 1, Math.ceil(q * times.length) - 1)]!;
    return { p50: at(0.5), p99: at(0.99), max: times.at(-1)! };
  } finally {
    for (const server of servers) await server.stop();
    await db.drop();
  }
}

/**
 * `nodes` floor servers (bench/floor-pg-server.ts) on a fresh database, posted to at twice the
 * in-flight count (the connections of a full cycle's producers and workers together).
 */
async function floorPhase(nodes: number): Promise<Phase> {
  const db = await freshDatabase();
  const servers: Array<{ url: string; pid: number; stop: () => Promise<void> }> = [];
  try {
    await admin('CREATE TABLE floor_rows (id bigserial PRIMARY KEY, body text NOT NULL)', db.name);
    for (let n = 0; n < nodes; n++) {
      const proc = spawnTracked(['--import', 'tsx', path.join(BENCH_DIR, 'floor-pg-server.ts'), JSON.stringify({ url: db.url })]);
      let out = '';
      const url = await new Promise<string>((resolve, reject) => {
        proc.stdout!.on('data', (c: Buffer) => {
          out += c.toString();
          const m = /listening on (http:\/\/\S+)/.exec(out);
          if (m) resolve(m[1]!);
        });
        proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
        proc.once('exit', (code) => reject(new Error(`the floor server exited with ${code}:\n${out}`)));
      });
      servers.push({ url, pid: proc.pid!, stop: async () => void (proc.kill('SIGTERM'), await new Promise((r) => (proc.exitCode !== null ? r(null) : proc.once('exit', r)))) });
    }
    const urls = servers.map((s) => s.url);
    const spec: LoadSpec = { mode: 'post', url: urls[0]!, urls: nodes > 1 ? urls : undefined, host: HOST, queue: 'q', inFlight: 2 * IN_FLIGHT, durationMs: 300_000, maxCount: 3 * JOBS, itemBytes: 190, recordLatency: false };
    if (WARM_UP > 0) await runChild<LoadResult>('load.ts', { ...spec, maxCount: 3 * WARM_UP }, 360_000);
    const before = await dbFigures(db.name);
    const cpu = followCpu(db.name);
    const nodeCpu = (): number => servers.reduce((sum, s) => sum + cpuMsOf(s.pid), 0);
    const nodeCpuBefore = nodeCpu();
    const r = await runChild<LoadResult>('load.ts', spec, 360_000);
    if (r.errors > 0) throw new Error(`floor: ${r.errors} errors, the first: ${r.firstError}`);
    const nodeCpuMsPerJob = (nodeCpu() - nodeCpuBefore) / r.count;
    const after = { ...(await dbFigures(db.name)), cpu: await cpu.stop() };
    return { label: `floor: answering posts after a shared COMMIT, ${nodes === 1 ? 'one process' : `${nodes} processes`} (per post, not per job)`, rate: r.rate, jobs: r.count, db: perJob(before, after, r.count), nodeCpuMsPerJob };
  } finally {
    for (const server of servers) await server.stop();
    await db.drop();
  }
}

async function pgbossPhase(): Promise<Phase> {
  const db = await freshDatabase();
  try {
    const jobs = Math.max(1000, Math.round(JOBS / 4));
    const before = await dbFigures(db.name);
    const cpu = followCpu(db.name);
    const spec: PgBossSpec = { url: db.url, jobs, inFlight: IN_FLIGHT, itemBytes: 190, timeoutMs: 300_000 };
    const r = await runChild<PgBossResult>('pgboss-load.ts', spec, 360_000);
    if (r.timedOut) throw new Error('pg-boss did not finish in time');
    const after = { ...(await dbFigures(db.name)), cpu: await cpu.stop() };
    return { label: 'pg-boss full cycle, same PostgreSQL', rate: r.rate, jobs: r.completed, db: perJob(before, after, r.completed) };
  } finally {
    await db.drop();
  }
}

function perJob(before: DbFigures, after: DbFigures, jobs: number): Phase['db'] {
  return {
    commitsPerJob: (after.commits - before.commits) / jobs,
    walBytesPerJob: (after.walBytes - before.walBytes) / jobs,
    cpuMsPerJob: ([...after.cpu].reduce((sum, [pid, s]) => sum + s - (before.cpu.get(pid) ?? 0), 0) * 1000) / jobs,
  };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
const fmt = (n: number, d = 0): string => n.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });

async function main(): Promise<void> {
  const kinds: Array<{ key: string; run: () => Promise<Phase> }> = [
    { key: 'pg-cycle', run: () => svcqPhase('cycle', true) },
    { key: 'pg-handin', run: () => svcqPhase('handin', true) },
    { key: 'pg-cycle-3', run: () => svcqPhase('cycle', true, 3) },
    { key: 'embedded-cycle', run: () => svcqPhase('cycle', false) },
    { key: 'pgboss', run: () => pgbossPhase() },
    { key: 'floor-1', run: () => floorPhase(1) },
    { key: 'floor-3', run: () => floorPhase(3) },
  ];
  const rounds: Array<Record<string, Phase>> = [];
  for (let r = 0; r < ROUNDS; r++) {
    const round: Record<string, Phase> = {};
    // Alternate the order, so that no side always runs first on a machine whose speed drifts.
    for (const k of r % 2 === 0 ? kinds : [...kinds].reverse()) {
      const p = await k.run();
      round[k.key] = p;
      console.log(`[round ${r + 1}] ${p.label}: ${fmt(p.rate)} jobs/s${p.db ? ` (${fmt(p.db.commitsPerJob, 2)} commits, ${fmt(p.db.walBytesPerJob)} WAL bytes, ${fmt(p.db.cpuMsPerJob, 3)} ms database CPU, ${fmt(p.nodeCpuMsPerJob ?? 0, 3)} ms svcq CPU per job)` : ''}`);
    }
    rounds.push(round);
  }
  const ratio = (a: string, b: string): number[] => rounds.map((r) => r[a]!.rate / r[b]!.rate);
  console.log('');
  console.log(`svcq on PostgreSQL, ${ROUNDS} paired rounds, ${IN_FLIGHT} in flight, ${fmt(JOBS)} jobs per svcq phase${WARM_UP > 0 ? ` after ${fmt(WARM_UP)} to warm up` : ', none to warm up'} (${os.cpus().length} cores, node ${process.version})`);
  for (const key of ['pg-cycle', 'pg-handin', 'pg-cycle-3', 'embedded-cycle', 'pgboss', 'floor-1', 'floor-3']) {
    const list = rounds.map((r) => r[key]!);
    const m = list.find((p) => p.rate === median(list.map((x) => x.rate)))!;
    const db = m.db ? `; per job: ${fmt(m.db.commitsPerJob, 3)} commits, ${fmt(m.db.walBytesPerJob)} WAL bytes, ${fmt(m.db.cpuMsPerJob, 3)} ms database CPU${m.nodeCpuMsPerJob !== undefined ? `, ${fmt(m.nodeCpuMsPerJob, 3)} ms svcq CPU (all nodes)` : ''}` : '';
    console.log(`  ${m.label}: ${fmt(m.rate)} jobs/s (median of ${list.map((p) => fmt(p.rate)).join(', ')})${db}`);
  }
  const targets: Array<[string, number[], number]> = [
    ['svcq full cycle on PostgreSQL ≥ 10× pg-boss', ratio('pg-cycle', 'pgboss'), 10],
    ['svcq full cycle on PostgreSQL ≥ 0.5× embedded', ratio('pg-cycle', 'embedded-cycle'), 0.5],
    ['three nodes on one database ≥ 1.0× one node', ratio('pg-cycle-3', 'pg-cycle'), 1.0],
  ];
  for (const [label, list, goal] of targets) {
    const m = median(list);
    console.log(`  ${m >= goal ? 'pass' : 'FAIL'}  ${label}: median of ${list.map((x) => fmt(x, 2)).join(', ')} = ${fmt(m, 2)}×`);
  }
  const floor = ratio('floor-3', 'floor-1');
  console.log(`  (the floor: three processes / one process, posts answered after a shared COMMIT: median of ${floor.map((x) => fmt(x, 2)).join(', ')} = ${fmt(median(floor), 2)}×)`);
  const wake = await wakePhase(WAKE_SAMPLES);
  console.log(`  ${wake.p99 <= 50 ? 'pass' : 'FAIL'}  cross-node wake p99 ≤ 50 ms (a claim waiting on one node, the post sent to another; ${WAKE_SAMPLES} samples): p50 ${fmt(wake.p50, 1)} ms, p99 ${fmt(wake.p99, 1)} ms, max ${fmt(wake.max, 1)} ms`);
}

try {
  await main();
} catch (err) {
  console.error(`bench:postgres failed: ${(err as Error).message}`);
  process.exitCode = 1;
} finally {
  for (const c of children) c.kill('SIGKILL');
}
