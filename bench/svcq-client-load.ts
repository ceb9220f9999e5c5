/**
 * svcq through its own client library, for `--vs`: `inFlight` producer loops each `client.post()`
 * an item and wait for its answer (posts made while another is on its way coalesce into batches,
 * the library's default) while `client.work()` with concurrency `inFlight` returns a result for
 * each item (handed in with its next claim, the library's default). Reports results accepted per
 * second from the first post to the last result the server accepted (the `finished` event), and
 * the CPU time of `cpuPid` (the `svcq serve` process) over the same window.
 */
import { performance } from 'node:perf_hooks';
import { SvcqClient } from '../src/client/index.js';
import { makeItem, RESULT_PREFIX } from './protocol.js';
import { cpuMsOf, type CycleResult, type CycleSpec } from './procs.js';

const spec = JSON.parse(process.argv[2] ?? '') as CycleSpec;
const client = new SvcqClient({ url: spec.url, host: spec.host });

let completed = 0;
let posted = 0;
let errors = 0;
let firstError: string | undefined;
const fail = (message: string): void => {
  errors++;
  firstError ??= message;
};
let finish: () => void = () => {};
const allDone = new Promise<void>((resolve) => (finish = resolve));

const serverCpu0 = cpuMsOf(spec.cpuPid);
const clientCpu0 = process.cpuUsage();
const t0 = performance.now();
const deadline = t0 + spec.timeoutMs;

const working = client.work(spec.queue, () => ({ output: 'done' }), {
  concurrency: spec.inFlight,
  onEvent: (e) => {
    if (e.event === 'finished' && e.accepted) {
      completed++;
      if (completed >= spec.jobs) finish();
    } else if (e.event === 'failed' || e.event === 'error' || e.event === 'retry') {
      fail(`work: ${JSON.stringify(e)}`);
    }
  },
});

async function producer(): Promise<void> {
  while (posted < spec.jobs && performance.now() < deadline) {
    const seq = posted++;
    try {
      await client.post(spec.queue, JSON.parse(makeItem(seq, spec.itemBytes)) as Record<string, unknown>);
    } catch (err) {
      fail(`post: ${(err as Error).message}`);
    }
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
const serverCpuMs = cpuMsOf(spec.cpuPid) - serverCpu0;
const clientCpu = process.cpuUsage(clientCpu0);
clearTimeout(timer);
await working.stop();

const result: CycleResult = { completed, posted, errors, firstError, elapsedMs, rate: (completed * 1000) / elapsedMs, timedOut, serverCpuMs, clientCpuMs: (clientCpu.user + clientCpu.system) / 1000 };
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
process.exit(0);
