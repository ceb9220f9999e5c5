/**
 * What schedules cost an idle server (decisions §8.3), and how late they post:
 *
 *   node --import tsx bench/idle-schedules.ts [dir] [--store postgres://…/postgres] [--seconds 20] [--cpu-prof DIR]
 *
 * `dir` is a checkout with a built `dist/` (default: this one). Defines 10 queues of 100
 * `every: 1` schedules each (1,000 schedules: 1,000 items a second), waits 5 s, then reads the
 * server's CPU from /proc/<pid>/stat (utime + stime) over `--seconds`, with nothing else asked of
 * it. Then reads the `posted` task events of those seconds from the task history, and reports how
 * late each occurrence was posted (the event's `ts`, the commit's time, minus the occurrence):
 * the largest and the 99th percentile. `npm run bench` runs {@link measureSchedules} as a phase.
 */
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

export const SCHEDULE_QUEUES = 10;
export const SCHEDULES_PER_QUEUE = 100;
const HOST = 'sched.bench.test';

export interface ScheduleFigures {
  schedules: number;
  seconds: number;
  /** The server's CPU over the window, in % of one core. */
  cpuPercent: number;
  /** Items posted in the window (from the task events). */
  posted: number;
  /** Occurrences in the window that were posted more than once (must be 0). */
  duplicates: number;
  lateMaxMs: number;
  lateP99Ms: number;
  lateMedianMs: number;
}

function call(url: string, method: string, p: string, body: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(p, url), { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** CPU time (user + system) of a process so far, in ms. */
export function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** Defines the schedules on a running server, lets them settle, measures (see the file's comment). */
export async function measureSchedules(url: string, master: string, cpuMs: () => number, seconds = 20): Promise<ScheduleFigures> {
  const auth = { authorization: `Bearer ${master}` };
  for (let q = 0; q < SCHEDULE_QUEUES; q++) {
    const schedules = Object.fromEntries(Array.from({ length: SCHEDULES_PER_QUEUE }, (_, n) => [`s${n}`, { every: 1, item: { q, n } }]));
    const reply = await call(url, 'PUT', `/api/v2/def?path=${HOST}/svc-queues/sched-${q}.json`, JSON.stringify({ retainSeconds: 60, schedules }), auth);
    if (reply.status !== 200) throw new Error(`defining the schedules failed: ${reply.status} ${reply.text}`);
  }
  await new Promise((r) => setTimeout(r, 5000));
  const [c0, t0] = [cpuMs(), Date.now()];
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const [c1, t1] = [cpuMs(), Date.now()];
  // The task history gets the events right after they are durable; give it a moment.
  await new Promise((r) => setTimeout(r, 2000));
  const files = (JSON.parse((await call(url, 'GET', '/api/v2/tasks', '', auth)).text) as { files: Array<{ name: string }> }).files;
  const late: number[] = [];
  const seen = new Set<string>();
  let duplicates = 0;
  for (const f of files) {
    const text = (await call(url, 'GET', `/api/v2/tasks/file?name=${f.name}`, '', auth)).text;
    for (const line of text.split('\n')) {
      if (!line.includes('"occurrence"')) continue;
      const e = JSON.parse(line) as { ts: number; queue: string; schedule: string; occurrence: number };
      if (e.occurrence < t0 || e.occurrence >= t1) continue;
      const key = `${e.queue}/${e.schedule}/${e.occurrence}`;
      if (seen.has(key)) duplicates++;
      seen.add(key);
      late.push(e.ts - e.occurrence);
    }
  }
  late.sort((a, b) => a - b);
  const at = (p: number): number => late[Math.min(late.length - 1, Math.floor(late.length * p))] ?? Number.NaN;
  const elapsed = (t1 - t0) / 1000;
  return { schedules: SCHEDULE_QUEUES * SCHEDULES_PER_QUEUE, seconds: elapsed, cpuPercent: ((c1 - c0) / 1000 / elapsed) * 100, posted: late.length, duplicates, lateMaxMs: late[late.length - 1] ?? Number.NaN, lateP99Ms: at(0.99), lateMedianMs: at(0.5) };
}

export function describeSchedules(f: ScheduleFigures): string {
  return `${f.schedules} every-1-s schedules, ${f.seconds.toFixed(1)} s: server CPU ${f.cpuPercent.toFixed(1)}% of a core; ${f.posted.toLocaleString('en-US')} items posted, ${f.duplicates} twice; late by median ${f.lateMedianMs} ms, p99 ${f.lateP99Ms} ms, max ${f.lateMaxMs} ms`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({ options: { store: { type: 'string' }, seconds: { type: 'string', default: '20' }, 'cpu-prof': { type: 'string' } }, allowPositionals: true });
  const dir = path.resolve(positionals[0] ?? path.join(import.meta.dirname, '..'));
  const master = 'sched-bench-master-token-0123456789abcdef';
  const root = path.join(os.tmpdir(), `svcq-sched-bench-${process.pid}`);
  let store: string[] = [];
  let dropDb: (() => Promise<void>) | undefined;
  if (values.store) {
    const pg = (await import('pg')).default;
    const admin = new pg.Client({ connectionString: values.store });
    await admin.connect();
    const db = `svcq_sched_${process.pid}`;
    await admin.query(`CREATE DATABASE ${db}`);
    const u = new URL(values.store);
    u.pathname = `/${db}`;
    store = ['--store', u.href];
    dropDb = async () => {
      await admin.query(`DROP DATABASE ${db} WITH (FORCE)`);
      await admin.end();
    };
  }
  const prof = values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${values['cpu-prof']}`] : [];
  const proc = spawn(process.execPath, [...prof, path.join(dir, 'bin/run.js'), 'serve', '--root', root, '--port', '0', '--bind', '127.0.0.1', '--master-token', master, ...store], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise<string>((resolve) => {
    let out = '';
    proc.stdout!.on('data', (c: Buffer) => {
      out += String(c);
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
  });
  try {
    const figures = await measureSchedules(url, master, () => cpuMsOf(proc.pid!), Number(values.seconds));
    console.log(`${values.store ? 'PostgreSQL' : 'embedded'}: ${describeSchedules(figures)}`);
  } finally {
    proc.kill('SIGTERM');
    await new Promise((r) => proc.on('exit', r));
    rmSync(root, { recursive: true, force: true });
    await dropDb?.();
  }
}
