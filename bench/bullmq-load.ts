/**
 * The BullMQ side of `--vs bullmq`, in a child process of its own like svcq's load generator:
 * `inFlight` producer loops add `jobs` jobs while one Worker with concurrency `inFlight` returns a
 * result for each. Reports completed jobs per second from the first add to the last completion,
 * and, given `cpuPid` (redis-server), that process's CPU time over the same window.
 */
import { performance } from 'node:perf_hooks';
import { Queue, Worker } from 'bullmq';
import { makeItem, RESULT_PREFIX } from './protocol.js';
import { cpuMsOf, type BullmqResult, type BullmqSpec } from './procs.js';

const spec = JSON.parse(process.argv[2] ?? '') as BullmqSpec;
const connection = { host: '127.0.0.1', port: spec.redisPort, maxRetriesPerRequest: null };
const name = `bench-${process.pid}`;

const queue = new Queue(name, { connection });
await queue.waitUntilReady();

let completed = 0;
let added = 0;
let finish: () => void = () => {};
const allDone = new Promise<void>((resolve) => (finish = resolve));

const worker = new Worker(name, async () => ({ output: 'done' }), { connection, concurrency: spec.inFlight, autorun: false });
worker.on('completed', () => {
  completed++;
  if (completed >= spec.jobs) finish();
});
worker.on('error', (err) => process.stderr.write(`bullmq worker: ${err.message}\n`));
await worker.waitUntilReady();

const serverCpu0 = spec.cpuPid === undefined ? 0 : cpuMsOf(spec.cpuPid);
const clientCpu0 = process.cpuUsage();
const t0 = performance.now();
void worker.run();
const deadline = t0 + spec.timeoutMs;

async function producer(): Promise<void> {
  while (added < spec.jobs && performance.now() < deadline) {
    const seq = added++;
    await queue.add('job', JSON.parse(makeItem(seq, spec.itemBytes)) as Record<string, unknown>);
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
const serverCpuMs = spec.cpuPid === undefined ? undefined : cpuMsOf(spec.cpuPid) - serverCpu0;
const clientCpu = process.cpuUsage(clientCpu0);
clearTimeout(timer);

await worker.close(true);
await queue.close();

const result: BullmqResult = { completed, added, elapsedMs, rate: (completed * 1000) / elapsedMs, timedOut, serverCpuMs, clientCpuMs: (clientCpu.user + clientCpu.system) / 1000 };
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
process.exit(0);
