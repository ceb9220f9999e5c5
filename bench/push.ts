/**
 * `npm run bench:push -- [--items 20000] [--concurrency 32] [--rounds 3] [--store postgres://USER@HOST:PORT/DB] [--cpu-prof DIR]`:
 * a push queue (decisions §9.1) against workers doing the same work, on the same server in the same
 * run. With `--store`, the server keeps its items in a fresh database made on that PostgreSQL
 * server (dropped after).
 *
 * The target is bench/floor-server.ts (a node:http handler that parses the body and answers at
 * once), a process of its own. Each round, on a fresh queue each:
 * - push: a queue with `push` to the target (`concurrency` deliveries at once), paused while its
 *   items are posted in batches of 1,000, then resumed: the time until every item is finished.
 * - workers: the same number of items posted the same way to a plain queue, then one
 *   bench/push-workers.ts process (`client.work()` as `svcq work` runs: `concurrency` handlers,
 *   prefetching as many, results handed in with the next claim) whose handler POSTs each item to
 *   the same target: the time until every item is finished.
 * Both are timed alike, by the server's own counts: read again after half the time the rate so far
 * says is left (20 ms at least, 1 s at most), so that the end is seen within 20 ms while the reads
 * (a queue view is seven statements on PostgreSQL) take little from the server under measure. It
 * prints cycles per second of each, and the ratio push ÷ workers per round, with the median and the spread.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { freshDatabase } from './pg-admin.js';
import { request } from 'undici';
import { BENCH_DIR, killAll, REPO, startFloor, startSvcq } from './procs.js';

const { values: opts } = parseArgs({
  options: {
    items: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '32' },
    'cpu-prof': { type: 'string' },
    rounds: { type: 'string', default: '3' },
    store: { type: 'string' },
  },
  strict: true,
});
const ITEMS = Number(opts.items);
const CONCURRENCY = Number(opts.concurrency);
const ROUNDS = Number(opts.rounds);
const HOST = 'push.bench';
const MASTER = 'master-push-bench-0123456789abcdef';
const BATCH = 1000;
const t00 = performance.now();
const log = (line: string): void => console.log(`[${((performance.now() - t00) / 1000).toFixed(0).padStart(4)} s] ${line}`);

process.on('SIGINT', () => {
  killAll();
  process.exit(130);
});

/** With --store: the database this run makes and drops. */
const database = opts.store ? await freshDatabase(opts.store, 'svcq_bench_push') : undefined;

const dir = mkdtempSync(path.join(os.tmpdir(), 'svcq-bench-push-'));
const target = await startFloor({ durable: false, dir });
const server = await startSvcq({ root: path.join(dir, 'root'), masterToken: MASTER, nodeArgs: opts['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', opts['cpu-prof']] : [], args: ['--push-allow', `${target.url}/`, ...(database ? ['--store', database.url] : [])] });
log(`svcq on ${server.url} (${database ? 'PostgreSQL' : 'embedded'} store), target ${target.url}; ${ITEMS} items per side, concurrency ${CONCURRENCY}, ${ROUNDS} rounds`);

async function call(method: string, p: string, body?: string, host = new URL(server.url).host): Promise<unknown> {
  // The master token goes to /api only: on the queue domain the public queues need none.
  const auth: Record<string, string> = p.startsWith('/api/') ? { authorization: `Bearer ${MASTER}` } : {};
  const res = await request(`${server.url}${p}`, { method, body, headers: { host, ...auth, 'content-type': 'application/json' } });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${method} ${p}: ${res.statusCode} ${text}`);
  return text === '' ? undefined : JSON.parse(text);
}

async function define(name: string, def: Record<string, unknown>): Promise<void> {
  await call('PUT', `/api/v2/def?path=${HOST}/svc-queues/${name}.json`, JSON.stringify({ access: { post: 'public', fetch: 'public', work: 'public' }, leaseSeconds: 60, ...def }));
  // Served once the queue answers (definitions take effect for the next request).
  await call('GET', `/${name}/items/ffffffffffffffff`, undefined, HOST).catch(() => undefined);
}

async function postAll(name: string): Promise<void> {
  const batch = JSON.stringify(Array.from({ length: BATCH }, (_, i) => ({ n: i, pad: 'x'.repeat(150) })));
  for (let done = 0; done < ITEMS; done += BATCH) await call('POST', `/${name}/batch`, batch, HOST);
}

async function finished(name: string): Promise<number> {
  const view = (await call('GET', `/api/v2/queues/${HOST}/${name}`)) as { counts: { finished: number } };
  return view.counts.finished;
}

/** Milliseconds from `start()` until every item of the queue is finished. */
async function timed(name: string, start: () => Promise<void> | void): Promise<number> {
  const t0 = performance.now();
  await start();
  for (;;) {
    const done = await finished(name);
    if (done >= ITEMS) return performance.now() - t0;
    const left = done === 0 ? 40 : (ITEMS - done) / (done / (performance.now() - t0));
    await new Promise((r) => setTimeout(r, Math.min(1000, Math.max(20, left / 2))));
  }
}

async function pushRound(r: number): Promise<number> {
  const name = `push-${r}`;
  await define(name, { push: { url: `${target.url}/`, concurrency: CONCURRENCY } });
  await call('POST', `/api/v2/queues/${HOST}/${name}/pause`);
  await postAll(name);
  return timed(name, async () => {
    await call('POST', `/api/v2/queues/${HOST}/${name}/resume`);
  });
}

async function workersRound(r: number): Promise<number> {
  const name = `work-${r}`;
  await define(name, {});
  await postAll(name);
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, 'push-workers.ts'), JSON.stringify({ url: server.url, host: HOST, queue: name, target: `${target.url}/`, concurrency: CONCURRENCY })], {
    cwd: REPO,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (c: Buffer) => {
      if (c.toString().includes('READY')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the workers exited (${code}) before they were ready`)));
  });
  try {
    return await timed(name, () => {
      child.stdin!.write('go\n');
    });
  } finally {
    child.kill('SIGKILL');
  }
}

const rates = { push: [] as number[], workers: [] as number[] };
const ratios: number[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    // Taking turns which side goes first, so that neither always meets the warmer server.
    const order = r % 2 === 0 ? (['workers', 'push'] as const) : (['push', 'workers'] as const);
    const got: Record<string, number> = {};
    for (const side of order) {
      const ms = side === 'push' ? await pushRound(r) : await workersRound(r);
      got[side] = (ITEMS / ms) * 1000;
      rates[side].push(got[side]!);
      log(`round ${r + 1}: ${side.padEnd(7)} ${got[side]!.toFixed(0).padStart(6)} cycles/s (${(ms / 1000).toFixed(2)} s)`);
    }
    ratios.push(got.push! / got.workers!);
    log(`round ${r + 1}: push ÷ workers = ${ratios.at(-1)!.toFixed(2)}`);
  }
} finally {
  await server.stop().catch((err: Error) => console.error(err.message));
  await target.stop().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
  await database?.drop();
}
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  `push ${median(rates.push).toFixed(0)} cycles/s, workers ${median(rates.workers).toFixed(0)} cycles/s (medians); push ÷ workers ${median(ratios).toFixed(2)} (rounds ${ratios.map((x) => x.toFixed(2)).join(', ')}; spread ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})`,
);
