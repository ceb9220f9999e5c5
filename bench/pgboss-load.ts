/**
 * pg-boss beside svcq on the same PostgreSQL (`bench/postgres.ts`), in a child process of its
 * own: `inFlight` producer loops send `jobs` jobs while workers fetch batches of `inFlight` and
 * complete each. Reports completed jobs per second from the first send to the last completion.
 * pg-boss polls for work (0.5 s at the least), so its workers are given a batch as large as the
 * in-flight count and as many subscriptions as producers, to keep its polling from idling.
 */
import { performance } from 'node:perf_hooks';
import PgBoss from 'pg-boss';
import { makeItem, RESULT_PREFIX } from './protocol.js';

export interface PgBossSpec {
  url: string;
  jobs: number;
  inFlight: number;
  itemBytes: number;
  timeoutMs: number;
}

export interface PgBossResult {
  completed: number;
  elapsedMs: number;
  rate: number;
  timedOut: boolean;
}

const spec = JSON.parse(process.argv[2] ?? '') as PgBossSpec;
const boss = new PgBoss({ connectionString: spec.url, max: spec.inFlight + 4 });
boss.on('error', (err: Error) => process.stderr.write(`pg-boss: ${err.message}\n`));
await boss.start();
const name = `bench_${process.pid}`;
await boss.createQueue(name);

let completed = 0;
let sent = 0;
let finish: () => void = () => {};
const allDone = new Promise<void>((resolve) => (finish = resolve));
const t0 = performance.now();
for (let w = 0; w < 4; w++) {
  await boss.work(name, { batchSize: spec.inFlight, pollingIntervalSeconds: 0.5 }, async (jobs) => {
    completed += jobs.length;
    if (completed >= spec.jobs) finish();
    return { output: 'done' };
  });
}
const deadline = t0 + spec.timeoutMs;
async function producer(): Promise<void> {
  while (sent < spec.jobs && performance.now() < deadline) {
    const seq = sent++;
    await boss.send(name, JSON.parse(makeItem(seq, spec.itemBytes)) as object);
  }
}
let timedOut = false;
const timer = setTimeout(() => {
  timedOut = true;
  finish();
}, spec.timeoutMs);
await Promise.all(Array.from({ length: spec.inFlight }, () => producer()));
await allDone;
const elapsedMs = performance.now() - t0;
clearTimeout(timer);
await boss.stop({ graceful: false, wait: false });
const result: PgBossResult = { completed, elapsedMs, rate: (completed * 1000) / elapsedMs, timedOut };
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
process.exit(0);
