/**
 * What callbacks (decisions §9.2) add to the full cycle: the server's CPU per job for post → claim
 * → result on a queue without a callback and on one whose `callback` is a local node:http receiver
 * answering 200 at once, in alternating rounds on one server.
 *
 *   npm run build && node --import tsx bench/callbacks.ts [--rounds 3] [--jobs 8000] [--in-flight 32] [--pace N] [--store postgres://USER@HOST:PORT/DB]
 *
 * `--cpu-prof DIR` profiles the server (written to DIR when it stops).
 *
 * Each round also runs the plain queue a second time, its posts paced at the rate the callback
 * phase ran: a server that runs slower batches less and pays more per job for it, so this ratio
 * is the callbacks' own cost at the same pace. `--pace N` paces both sides at N posts a second.
 *
 * A phase is bench/load.ts's `cycle` (producers posting, workers claiming with a long poll and
 * posting results); on the callback queue it ends once every callback is delivered (the queue's
 * view shows none owed), so that the delivery's CPU is counted. The figure is the server process's
 * /proc utime+stime over the phase divided by the jobs; the ratio (callback / plain) is taken
 * within each round, and the median and spread (min–max) of the rounds' ratios are printed.
 *
 * Beside it, two floors: a plain job plus one bare POST, the POST's CPU measured in a process of
 * its own (bench/outbound-floor.ts). Sent 32 at a time, one wake-up reads many answers: the least
 * a POST can cost. Sent at the rate the callback phase ran, each when its time comes, most answers
 * wake the process for themselves, as a server's callbacks do when items end a few at a time.
 */
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { freshDatabase } from './pg-admin.js';
import { cpuMsOf, killAll, runLoad, startSvcq } from './procs.js';

const HOST = 'bench.test';
const MASTER = 'bench-master-token-0123456789abcdef';
const ACCESS = { post: 'public', fetch: 'public', work: 'public' };

const { values: opts } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    jobs: { type: 'string', default: '8000' },
    'in-flight': { type: 'string', default: '32' },
    pace: { type: 'string' },
    store: { type: 'string' },
    'cpu-prof': { type: 'string' },
  },
  strict: true,
});
const rounds = Number(opts.rounds);
const jobs = Number(opts.jobs);
const inFlight = Number(opts['in-flight']);
/** `--pace N`: both sides post N items a second (each post waits for its time), below what the machine can do, so that neither side batches more for being busier. */
const pace = opts.pace === undefined ? undefined : Number(opts.pace);

let received = 0;
const receiver = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    received++;
    res.end();
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`;

const root = mkdtempSync(path.join(os.tmpdir(), 'svcq-bench-callbacks-'));
const database = opts.store ? await freshDatabase(opts.store, 'svcq_bench_callbacks') : undefined;
const store = database?.url;
// startSvcq passes its environment on: the server may call the receiver, and keeps its items where asked.
process.env.SVCQ_PUSH_ALLOW = hook;
if (store) process.env.SVCQ_STORE = store;
const server = await startSvcq({ root, masterToken: MASTER, nodeArgs: opts['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', opts['cpu-prof']] : [] });

async function api(method: string, p: string, body?: unknown): Promise<unknown> {
  const res = await fetch(`${server.url}${p}`, { method, headers: { authorization: `Bearer ${MASTER}` }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return JSON.parse(text) as unknown;
}
await api('PUT', `/api/v2/def?path=${HOST}/svc-queues/plain.json`, { leaseSeconds: 300, access: ACCESS });
await api('PUT', `/api/v2/def?path=${HOST}/svc-queues/cb.json`, { leaseSeconds: 300, access: ACCESS, callback: hook });

async function owed(queue: string): Promise<number> {
  const view = (await api('GET', `/api/v2/queues/${HOST}/${queue}`)) as { callbacks?: { owed: number } };
  return view.callbacks?.owed ?? 0;
}

/** What one phase measured: the server's CPU µs per job, its rate, and (callbacks) how many trailed its last job and how long they took. */
interface PhaseResult {
  usPerJob: number;
  rate: number;
  behind: number;
  tailMs: number;
}

/** One phase: server CPU µs per job. */
async function phase(queue: 'plain' | 'cb', postsPerSecond?: number): Promise<PhaseResult> {
  const before = received;
  const cpu0 = cpuMsOf(server.pid);
  const r = await runLoad({ mode: 'cycle', url: server.url, host: HOST, queue, inFlight, durationMs: 120_000, maxCount: jobs, itemBytes: 190, recordLatency: false, postsPerSecond });
  if (r.errors > 0) throw new Error(`${queue}: ${r.errors} errors, the first: ${r.firstError}`);
  let behind = 0;
  let tailMs = 0;
  if (queue === 'cb') {
    // Every callback delivered and settled before the CPU is read.
    behind = r.count - (received - before);
    const t = performance.now();
    while (received - before < r.count || (await owed(queue)) > 0) await new Promise((resolve) => setTimeout(resolve, 50));
    tailMs = performance.now() - t;
  }
  const cpuMs = cpuMsOf(server.pid) - cpu0;
  return { usPerJob: (cpuMs * 1000) / r.count, rate: r.rate, behind, tailMs };
}

/**
 * The floor: µs of CPU one process spends sending `jobs` POSTs with undici to the receiver
 * (bench/outbound-floor.ts), 32 at a time, or at `rate` a second (as the callback phase sent them).
 */
function floor(rate?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'outbound-floor.ts'), hook, String(jobs), '32', ...(rate === undefined ? [] : [String(Math.round(rate))])], (err, stdout) => {
      if (err) reject(err);
      else resolve((JSON.parse(stdout) as { usPerPost: number }).usPerPost);
    });
  });
}

try {
  console.log(`callbacks bench: ${rounds} rounds of ${jobs} jobs per side, ${inFlight} in flight, ${store ? 'PostgreSQL' : 'embedded'} store${pace === undefined ? '' : `, both sides posting ${pace} items a second`}`);
  // Warm-up of both sides.
  await phase('plain', pace);
  await phase('cb', pace);
  const ratios: number[] = [];
  const floors: number[] = [];
  const pacedFloors: number[] = [];
  const pacedPlain: number[] = [];
  for (let n = 0; n < rounds; n++) {
    const order: Array<'plain' | 'cb'> = n % 2 === 0 ? ['plain', 'cb'] : ['cb', 'plain'];
    const got: Record<string, PhaseResult> = {};
    for (const side of order) got[side] = await phase(side, pace);
    // The plain queue again, its posts paced at the rate the callback phase ran: the same work at
    // the same pace (a server that runs slower batches less, and pays more per job for it).
    const paced = await phase('plain', got.cb!.rate);
    pacedPlain.push(got.cb!.usPerJob / paced.usPerJob);
    const post = await floor();
    const pacedPost = await floor(got.cb!.rate);
    const ratio = got.cb!.usPerJob / got.plain!.usPerJob;
    const floorRatio = (got.plain!.usPerJob + post) / got.plain!.usPerJob;
    const pacedRatio = (got.plain!.usPerJob + pacedPost) / got.plain!.usPerJob;
    ratios.push(ratio);
    floors.push(floorRatio);
    pacedFloors.push(pacedRatio);
    console.log(`round ${n + 1}: plain ${got.plain!.usPerJob.toFixed(0)} µs/job (${got.plain!.rate.toFixed(0)} jobs/s), callback ${got.cb!.usPerJob.toFixed(0)} µs/job (${got.cb!.rate.toFixed(0)} jobs/s; ${got.cb!.behind} callbacks not yet received when the last job ended, ${got.cb!.tailMs.toFixed(0)} ms to deliver them), ratio ${ratio.toFixed(3)}; plain at that pace ${paced.usPerJob.toFixed(0)} µs/job (${paced.rate.toFixed(0)} jobs/s), ratio ${(got.cb!.usPerJob / paced.usPerJob).toFixed(3)}; one bare POST ${post.toFixed(0)} µs at 32 in flight, (plain + it) / plain ${floorRatio.toFixed(3)}; ${pacedPost.toFixed(0)} µs at ${got.cb!.rate.toFixed(0)} a second, ${pacedRatio.toFixed(3)}`);
  }
  const median = (xs: number[]): string => {
    const sorted = [...xs].sort((a, b) => a - b);
    return `${sorted[Math.floor(sorted.length / 2)]!.toFixed(3)}× (spread ${sorted[0]!.toFixed(3)}–${sorted[sorted.length - 1]!.toFixed(3)})`;
  };
  console.log(`server CPU per job, callback / plain: median ${median(ratios)}; target ≤ 1.15×`);
  console.log(`the same, against the plain queue paced at the callback phase's rate: median ${median(pacedPlain)}`);
  console.log(`the floor, a plain job plus one bare POST and nothing else, 32 POSTs in flight: median ${median(floors)}`);
  console.log(`the same, the POSTs sent at the callback phase's rate: median ${median(pacedFloors)}`);
} finally {
  await server.stop().catch(() => undefined);
  receiver.close();
  rmSync(root, { recursive: true, force: true });
  await database?.drop();
  killAll();
}
