/**
 * Profiles the server of one build over one hot phase and summarises it:
 *
 *   node --import tsx bench/profile-phase.ts <dir> <handin|cycle|batch|drain|post|claim|claim-backlog> [topN] [jobs|seconds]
 *
 * `dir` is a checkout with a built `dist/`. The server runs on the store SVCQ_STORE names (the
 * embedded one without it; on a fresh database of that server, dropped at the end); with
 * SVCQ_NODES=N (and SVCQ_STORE), N servers on that database, the
 * load generator's connections spread over them, the first one profiled and the CPU of all
 * counted. The server runs under `node --cpu-prof`; after a
 * warm-up of the same phase, the window of the measured phase is summarised by
 * bench/profile-summary.ts (the busiest thread's profile: the server's). `drain` first fills the
 * queue with batch posts (outside the window). `claim` is claim → result (`drain`, 32 in flight)
 * for `jobs` items, every one posted with a random priority of 10 (decisions §8.1) just before;
 * `claim-backlog` the same with 100,000 items delayed a year and 1,000,000 waiting across the 10
 * priorities posted ahead of them (as `npm run bench -- --phases backlog-prio` seeds its server).
 * The .cpuprofile is kept under bench/results/.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, statSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { databaseUrl, query } from './pg-admin.js';
import { BENCH_DIR, cpuMsOf, runLoad } from './procs.js';
import { summariseProfile } from './profile-summary.js';
import type { LoadMode, LoadSpec } from './protocol.js';

const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const QUEUE_DEF = JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } });

const dir = process.argv[2] ?? '';
const which = process.argv[3] ?? 'handin';
const topN = Number(process.argv[4] ?? 30);
const size = Number(process.argv[5] ?? (which === 'handin' || which === 'cycle' ? 20_000 : 3));

const nodes = Number(process.env.SVCQ_NODES ?? 1);
if (nodes > 1 && !process.env.SVCQ_STORE) throw new Error('SVCQ_NODES needs SVCQ_STORE: several nodes share one PostgreSQL database');

// A database of its own, dropped at the end: items and task events left by an earlier run would
// be read again (each new node's history catches up on every event in the table) and measured.
const baseStore = process.env.SVCQ_STORE;
const database = `zz_prof_${process.pid}`;
if (baseStore) {
  await query(baseStore, 'postgres', `CREATE DATABASE ${database}`);
  process.env.SVCQ_STORE = databaseUrl(baseStore, database);
}

const tmp = mkdtempSync(path.join(os.tmpdir(), 'svcq-prof-'));
const t0 = performance.now();

function startNode(n: number): { proc: ReturnType<typeof spawn>; listening: Promise<string> } {
  const proc = spawn(process.execPath, ['--cpu-prof', '--cpu-prof-dir', path.join(tmp, `prof${n}`), path.join(dir, 'bin/run.js'), 'serve', '--root', path.join(tmp, `root${n}`), '--port', '0', '--bind', '127.0.0.1', '--master-token', MASTER], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const listening = new Promise<string>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
  });
  return { proc, listening };
}

// One after the other: the first creates the schema.
const started: Array<ReturnType<typeof startNode>> = [];
const urls: string[] = [];
for (let n = 0; n < nodes; n++) {
  started.push(startNode(n));
  urls.push(await started[n]!.listening);
}
const procs = started.map((s) => s.proc);
const url = urls[0]!;
const cpuOfAll = (): number => procs.reduce((sum, p) => sum + cpuMsOf(p.pid!), 0);

function define(name: string): Promise<void> {
  const base = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: Number(base.port), method: 'PUT', path: `/api/v2/def?path=${HOST}/svc-queues/${name}.json`, agent: false, headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`define ${name}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(QUEUE_DEF);
  });
}

async function run(mode: LoadMode, queue: string, extra: Partial<LoadSpec>): Promise<{ rate: number; count: number; cpuMs: number }> {
  await define(queue).catch(() => undefined);
  // A definition is live on every node within 1 s (decisions §6.1).
  if (nodes > 1) await new Promise((resolve) => setTimeout(resolve, 1200));
  const c0 = cpuOfAll();
  const r = await runLoad({ mode, url, urls: nodes > 1 ? urls : undefined, host: HOST, queue, inFlight: 32, durationMs: 3000, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 190, recordLatency: false, ...extra });
  if (r.errors) console.error(`${mode}: ${r.errors} errors: ${r.firstError}`);
  return { rate: r.rate, count: r.count, cpuMs: cpuOfAll() - c0 };
}

const phase = async (tag: string): Promise<{ rate: number; count: number; cpuMs: number }> => {
  switch (which) {
    case 'handin':
      return run('handin', `h${tag}`, { maxCount: size, durationMs: 120_000 });
    case 'cycle':
      return run('cycle', `c${tag}`, { maxCount: size, durationMs: 120_000 });
    case 'batch':
      return run('batch-post', `b${tag}`, { inFlight: 4, durationMs: size * 1000 });
    case 'drain':
      return run('drain-batch', `b${tag}`, { inFlight: 4, durationMs: 120_000 });
    case 'post':
      return run('post', `p${tag}`, { durationMs: size * 1000 });
    case 'claim':
    case 'claim-backlog':
      return run('drain', 'claims', { maxCount: size, durationMs: 120_000, priorities: 10 });
    default:
      throw new Error(`unknown phase ${which}`);
  }
};

if (which === 'drain') await run('batch-post', 'bwarm', { inFlight: 4, durationMs: 1500 });
if (which === 'claim' || which === 'claim-backlog') {
  await run('cycle', 'cwarm', { maxCount: 8000, durationMs: 120_000, priorities: 10 });
  const fill = (items: number, extra: Partial<LoadSpec>): Promise<unknown> => run('batch-post', 'claims', { inFlight: 4, maxCount: Math.ceil(items / 1000), durationMs: 3_600_000, priorities: 10, ...extra });
  if (which === 'claim-backlog') {
    await fill(100_000, { delayS: 31_536_000 });
    await fill(1_000_000, {});
  }
  await fill(size, {});
} else await phase('warm');
if (which === 'drain') await run('batch-post', 'bmain', { inFlight: 4, durationMs: 3000 });
const fromMs = performance.now() - t0;
const r = await phase('main');
const toMs = performance.now() - t0;
for (const p of procs) {
  p.kill('SIGTERM');
  await new Promise((resolve) => p.once('exit', resolve));
}
if (baseStore) await query(baseStore, 'postgres', `DROP DATABASE ${database} WITH (FORCE)`);
console.log(`${which}: ${r.rate.toFixed(0)}/s, ${r.count} items, server CPU ${((r.cpuMs * 1000) / r.count).toFixed(1)} µs/item${nodes > 1 ? ` (${nodes} nodes together; the profile is the first node's)` : ''}`);
const profDir = path.join(tmp, 'prof0');
const file = readdirSync(profDir)
  .filter((f) => f.endsWith('.cpuprofile'))
  .map((f) => path.join(profDir, f))
  .sort((a, b) => statSync(b).size - statSync(a).size)[0]!;
mkdirSync(path.join(BENCH_DIR, 'results'), { recursive: true });
const kept = path.join(BENCH_DIR, 'results', `profile-${which}-${Date.now()}.cpuprofile`);
copyFileSync(file, kept);
console.log(`profile: ${kept}`);
console.log(summariseProfile(kept, topN, { fromMs, toMs }));
