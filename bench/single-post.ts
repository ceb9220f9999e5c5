/**
 * The cost of one post: the server's CPU per single post (32 connections, one post at a time on
 * each, every post its own keep-alive HTTP exchange, as curl or a web app sends them), for svcq and
 * for the floor under it, in alternating rounds.
 *
 *   node --import tsx bench/single-post.ts [--rounds 5] [--seconds 4] [--sides floor,svcq,…] [--store postgres://USER@HOST:PORT/DB] [--dirs A,B]
 *
 * Sides (all running at once, each idle while another is measured; the order turns every round):
 *   floor          bench/floor-server.ts answering after an O_DSYNC group write (durable), or with
 *                  --store bench/floor-pg-server.ts answering after a shared COMMIT
 *   svcq           `svcq serve` of each dir in --dirs (default: this checkout), embedded, or on
 *                  --store (a database of its own, dropped at the end)
 *   svcq-off:PARTS the same with SVCQ_BENCH_OFF=PARTS (`+`-separated): accesslog, events, metrics —
 *                  parts switched off for this measurement only, to see what each costs
 *
 * Each figure is the server process's /proc utime+stime over the phase, divided by the posts
 * answered. A ratio is taken within each round (against the floor, and against the first svcq
 * side) and the median of the rounds' ratios is printed, with their spread (min–max).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { BENCH_DIR, REPO, cpuMsOf, runLoad } from './procs.js';

const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const QUEUE_DEF = JSON.stringify({ leaseSeconds: 300, access: { post: 'public', fetch: 'public', work: 'public' } });

const { values: opts } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '4' },
    sides: { type: 'string', default: 'floor,svcq' },
    store: { type: 'string' },
    dirs: { type: 'string' },
    'in-flight': { type: 'string', default: '32' },
  },
  strict: true,
});
const rounds = Number(opts.rounds);
const seconds = Number(opts.seconds);
const inFlight = Number(opts['in-flight']);
const PG = opts.store;
const dirs = (opts.dirs ?? REPO).split(',').filter(Boolean).map((d) => path.resolve(d));

interface Side {
  label: string;
  pid: number;
  url: string;
  proc: ChildProcess;
  cleanup: () => Promise<void>;
}

const databases: string[] = [];
async function admin(sql: string, database?: string): Promise<void> {
  const u = new URL(PG!);
  if (database) u.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: u.toString() });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
async function database(): Promise<string> {
  const name = `svcq_single_${process.pid}_${databases.length}`;
  await admin(`CREATE DATABASE ${name}`);
  databases.push(name);
  const u = new URL(PG!);
  u.pathname = `/${name}`;
  return u.toString();
}

function listening(proc: ChildProcess, what: string): Promise<string> {
  let out = '';
  return new Promise<string>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    proc.once('exit', (code) => reject(new Error(`${what} exited ${code}: ${out}`)));
  });
}

async function startFloorSide(): Promise<Side> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-single-floor-'));
  let arg: string;
  let script: string;
  if (PG) {
    const url = await database();
    await admin('CREATE TABLE floor_rows (id bigserial PRIMARY KEY, body text NOT NULL)', new URL(url).pathname.slice(1));
    script = 'floor-pg-server.ts';
    arg = JSON.stringify({ url });
  } else {
    script = 'floor-server.ts';
    arg = JSON.stringify({ durable: true, dir: root });
  }
  const proc = spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, script), arg], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  const url = await listening(proc, 'floor');
  return { label: 'floor', pid: proc.pid!, url, proc, cleanup: async () => rmSync(root, { recursive: true, force: true }) };
}

async function startSvcqSide(dir: string, off: string | undefined, label: string): Promise<Side> {
  const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-single-'));
  const store = PG ? ['--store', await database()] : [];
  const env = { ...process.env };
  if (off) env.SVCQ_BENCH_OFF = off.split('+').join(',');
  else delete env.SVCQ_BENCH_OFF;
  const proc = spawn(process.execPath, [path.join(dir, 'bin/run.js'), 'serve', '--root', root, '--port', '0', '--bind', '127.0.0.1', '--master-token', MASTER, ...store], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const url = await listening(proc, label);
  return { label, pid: proc.pid!, url, proc, cleanup: async () => rmSync(root, { recursive: true, force: true }) };
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

let queues = 0;
/** One measured phase on a fresh queue: µs of server CPU per post, and posts per second. */
async function phase(side: Side, durationMs: number): Promise<{ us: number; rate: number; count: number }> {
  const queue = `p${queues++}`;
  if (side.label !== 'floor') {
    const status = await call(side.url, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/${queue}.json`, QUEUE_DEF, { authorization: `Bearer ${MASTER}` });
    if (status !== 200) throw new Error(`${side.label}: defining ${queue} answered ${status}`);
  }
  const cpu0 = cpuMsOf(side.pid);
  const r = await runLoad({ mode: 'post', url: side.url, host: HOST, queue, inFlight, durationMs, maxCount: Number.MAX_SAFE_INTEGER, itemBytes: 190, recordLatency: false });
  const cpu = cpuMsOf(side.pid) - cpu0;
  if (r.errors > 0) throw new Error(`${side.label}: ${r.errors} errors, the first: ${r.firstError}`);
  return { us: (cpu * 1000) / r.count, rate: r.rate, count: r.count };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const sides: Side[] = [];
try {
  for (const spec of opts.sides.split(',')) {
    if (spec === 'floor') sides.push(await startFloorSide());
    else if (spec === 'svcq') for (const d of dirs) sides.push(await startSvcqSide(d, undefined, dirs.length > 1 ? `svcq ${path.basename(d)}` : 'svcq'));
    else if (spec.startsWith('svcq-off:')) for (const d of dirs) sides.push(await startSvcqSide(d, spec.slice('svcq-off:'.length), `${dirs.length > 1 ? `${path.basename(d)} ` : ''}off ${spec.slice('svcq-off:'.length)}`));
    else throw new Error(`unknown side ${spec}`);
  }
  console.log(`load average at the start: ${os.loadavg()[0]!.toFixed(2)}; ${rounds} rounds of ${seconds} s, ${inFlight} connections, store ${PG ? 'postgres' : 'embedded'}`);
  // Warm-up: the JIT, and V8's young generation grown to size.
  for (const s of sides) await phase(s, 2000);
  const figures = sides.map(() => [] as Array<{ us: number; rate: number }>);
  for (let r = 0; r < rounds; r++) {
    // Each side takes each place in the order in turn: the order rotates by one every round.
    const order = sides.map((_, i) => (i + r) % sides.length);
    for (const i of order) {
      const f = await phase(sides[i]!, seconds * 1000);
      figures[i]!.push(f);
      console.log(`round ${r + 1} ${sides[i]!.label.padEnd(28)} ${f.rate.toFixed(0).padStart(6)}/s  ${f.us.toFixed(1).padStart(6)} µs CPU/post  (${f.count})`);
    }
  }
  const floorAt = sides.findIndex((s) => s.label === 'floor');
  const svcqAt = sides.findIndex((s) => s.label.startsWith('svcq'));
  const ratio = (i: number, ref: number): string => {
    if (ref < 0 || ref === i) return '';
    const rs = figures[i]!.map((f, r) => f.us / figures[ref]![r]!.us);
    return `×${median(rs).toFixed(3)} (${Math.min(...rs).toFixed(3)}–${Math.max(...rs).toFixed(3)})`;
  };
  console.log('\nmedians; ratios are the median of the per-round ratios (min–max)');
  console.log(`${'side'.padEnd(28)} ${'posts/s'.padStart(7)} ${'µs/post'.padStart(8)} ${'spread'.padStart(13)}  ${'vs floor'.padEnd(24)} vs svcq`);
  sides.forEach((s, i) => {
    const us = figures[i]!.map((f) => f.us);
    console.log(
      `${s.label.padEnd(28)} ${median(figures[i]!.map((f) => f.rate)).toFixed(0).padStart(7)} ${median(us).toFixed(1).padStart(8)} ${`${Math.min(...us).toFixed(1)}–${Math.max(...us).toFixed(1)}`.padStart(13)}  ${ratio(i, floorAt).padEnd(24)} ${ratio(i, svcqAt)}`,
    );
  });
} finally {
  for (const s of sides) {
    if (s.proc.exitCode === null) {
      s.proc.kill('SIGTERM');
      await new Promise((resolve) => s.proc.once('exit', resolve));
    }
    await s.cleanup();
  }
  for (const name of databases) await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
}
