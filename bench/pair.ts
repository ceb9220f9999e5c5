/**
 * Paired comparison of two or more builds of svcq on the hot phases: each build's server runs
 * side by side on a temp root, and the phases take turns (A B A B …, the order swapped every
 * round) so that a machine whose speed drifts weighs on every side alike.
 *
 *   node --import tsx bench/pair.ts <dir>[,<dir>…] [rounds] [phases] [jobs] [seconds]
 *
 * Each dir is a checkout with a built `dist/` (and node_modules linked). Phases (comma-separated):
 * `handin` (a full cycle of `jobs` jobs with hand-ins, 32+32 connections), `batch` (batch posts of
 * 1,000 items, 4 in flight, for `seconds`), `drain` (the batch queue drained by claims of 100 with
 * hand-ins, 4 in flight), `post` (single posts, 32 in flight, for `seconds`). Prints, per phase and
 * build, the rate and the server's CPU time per item (µs, /proc utime+stime of the whole process),
 * and each build's median ratio against the first. `cycle` is the full cycle of `jobs` jobs with
 * three requests per job. `handin-undici` is `handin` with undici as the load generator's client.
 *
 * With SVCQ_PAIR_PG=postgres://USER@HOST:PORT/DB each server runs on a PostgreSQL database of its
 * own, made for the run on that server and dropped at its end (`--store`). With SVCQ_PAIR_NODES=N
 * too, each build runs N servers on its database, the load generator's connections spread over
 * them, and the CPU per item is theirs together.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { cpuMsOf, runLoad } from './procs.js';
import type { LoadMode, LoadSpec } from './protocol.js';

const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const QUEUE_DEF = JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } });

const dirs = (process.argv[2] ?? '').split(',').filter(Boolean);
const rounds = Number(process.argv[3] ?? 3);
const phases = (process.argv[4] ?? 'handin,batch,drain').split(',');
const jobs = Number(process.argv[5] ?? 20_000);
const seconds = Number(process.argv[6] ?? 3);
if (dirs.length === 0) throw new Error('usage: pair.ts <dir>[,<dir>…] [rounds] [phases] [jobs] [seconds]');

interface Server {
  dir: string;
  url: string;
  pid: number;
  proc: ChildProcess;
  root: string;
}

/** One build's servers: one, or SVCQ_PAIR_NODES on one database. */
interface Side {
  dir: string;
  nodes: Server[];
}

const PG = process.env.SVCQ_PAIR_PG;
const NODES = Number(process.env.SVCQ_PAIR_NODES ?? 1);
if (NODES > 1 && !PG) throw new Error('SVCQ_PAIR_NODES needs SVCQ_PAIR_PG: several servers share one PostgreSQL database');
const databases: string[] = [];

/** A database of its own for one server (SVCQ_PAIR_PG), made now; dropped at the end. */
async function database(): Promise<string> {
  const name = `svcq_pair_${process.pid}_${databases.length}`;
  const admin = new pg.Client({ connectionString: PG });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  databases.push(name);
  const u = new URL(PG!);
  u.pathname = `/${name}`;
  return u.toString();
}

async function dropDatabases(): Promise<void> {
  const admin = new pg.Client({ connectionString: PG });
  await admin.connect();
  try {
    for (const name of databases) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

async function startSide(dir: string): Promise<Side> {
  const db = PG ? await database() : undefined;
  const nodes: Server[] = [];
  // One after the other: the first creates the schema.
  for (let n = 0; n < NODES; n++) nodes.push(await start(dir, db));
  return { dir, nodes };
}

async function start(dir: string, db: string | undefined): Promise<Server> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-pair-'));
  const store = db ? ['--store', db] : [];
  const proc = spawn(process.execPath, [path.join(dir, 'bin/run.js'), 'serve', '--root', root, '--port', '0', '--bind', '127.0.0.1', '--master-token', MASTER, ...store], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const check = (c: Buffer): void => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    };
    proc.stdout!.on('data', check);
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => reject(new Error(`server in ${dir} exited ${code}: ${out}`)));
  });
  return { dir, url, pid: proc.pid!, proc, root };
}

function call(url: string, method: string, p: string, body: string, headers: Record<string, string>): Promise<number> {
  const base = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: Number(base.port), method, path: p, agent: false, headers: { ...headers, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function define(s: Server, name: string): Promise<void> {
  const status = await call(s.url, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/${name}.json`, QUEUE_DEF, { authorization: `Bearer ${MASTER}` });
  if (status !== 200) throw new Error(`define ${name}: ${status}`);
}

interface Figure {
  rate: number;
  cpuUsPerItem: number;
  count: number;
}

async function phase(side: Side, mode: LoadMode, queue: string, extra: Partial<LoadSpec>): Promise<Figure> {
  const s = side.nodes[0]!;
  await define(s, queue);
  // A definition is live on every node within 1 s (decisions §6.1).
  if (side.nodes.length > 1) await new Promise((resolve) => setTimeout(resolve, 1200));
  const cpuOf = (): number => side.nodes.reduce((sum, n) => sum + cpuMsOf(n.pid), 0);
  const cpu0 = cpuOf();
  const urls = side.nodes.map((n) => n.url);
  const r = await runLoad({ mode, url: s.url, urls: urls.length > 1 ? urls : undefined, host: HOST, queue, inFlight: 32, durationMs: seconds * 1000, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 190, recordLatency: false, ...extra });
  const cpu = cpuOf() - cpu0;
  if (r.errors > 0) console.error(`${s.dir} ${mode}: ${r.errors} errors, first: ${r.firstError}`);
  return { rate: r.rate, cpuUsPerItem: (cpu * 1000) / Math.max(1, r.count), count: r.count };
}

const servers: Side[] = [];
for (const d of dirs) servers.push(await startSide(d));
try {
  // Warm-up: JIT and young generation.
  for (const s of servers) {
    await phase(s, 'handin', 'warm', { maxCount: 8000, durationMs: 60_000 });
    await phase(s, 'batch-post', 'warm-b', { inFlight: 4, durationMs: 1500 });
    await phase(s, 'drain-batch', 'warm-b', { inFlight: 4, durationMs: 60_000 });
  }
  const results = new Map<string, Figure[][]>(phases.map((p) => [p, servers.map(() => [])]));
  for (let r = 0; r < rounds; r++) {
    const order = servers.map((_, i) => i);
    if (r % 2 === 1) order.reverse();
    for (const p of phases) {
      for (const i of order) {
        const s = servers[i]!;
        let f: Figure;
        if (p === 'handin') f = await phase(s, 'handin', `h${r}`, { maxCount: jobs, durationMs: 120_000 });
        else if (p === 'handin-undici') f = await phase(s, 'handin', `hu${r}`, { maxCount: jobs, durationMs: 120_000, client: 'undici' });
        else if (p === 'cycle') f = await phase(s, 'cycle', `c${r}`, { maxCount: jobs, durationMs: 120_000 });
        else if (p === 'batch') f = await phase(s, 'batch-post', `b${r}`, { inFlight: 4 });
        else if (p === 'drain') f = await phase(s, 'drain-batch', `b${r}`, { inFlight: 4, durationMs: 120_000 });
        else if (p === 'post') f = await phase(s, 'post', `p${r}`, {});
        else throw new Error(`unknown phase ${p}`);
        results.get(p)![i]!.push(f);
        console.log(`round ${r + 1} ${p.padEnd(6)} ${path.basename(s.dir).padEnd(10)} ${f.rate.toFixed(0).padStart(7)}/s  ${f.cpuUsPerItem.toFixed(1).padStart(6)} µs CPU/item  (${f.count})`);
      }
    }
  }
  const median = (xs: number[]): number => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  };
  console.log('\nmedians (ratio to the first build: per-round pairs, then median)');
  for (const p of phases) {
    const per = results.get(p)!;
    per.forEach((list, i) => {
      const rate = median(list.map((f) => f.rate));
      const cpu = median(list.map((f) => f.cpuUsPerItem));
      const rateRatio = median(list.map((f, r) => f.rate / per[0]![r]!.rate));
      const cpuRatio = median(list.map((f, r) => f.cpuUsPerItem / per[0]![r]!.cpuUsPerItem));
      console.log(`${p.padEnd(6)} ${path.basename(servers[i]!.dir).padEnd(10)} rate ${rate.toFixed(0).padStart(7)}/s  cpu ${cpu.toFixed(1).padStart(6)} µs/item   rate×${rateRatio.toFixed(3)}  cpu×${cpuRatio.toFixed(3)}`);
    });
  }
} finally {
  for (const s of servers.flatMap((side) => side.nodes)) {
    s.proc.kill('SIGTERM');
    await new Promise((resolve) => s.proc.once('exit', resolve));
    rmSync(s.root, { recursive: true, force: true });
  }
  if (PG) await dropDatabases();
}
