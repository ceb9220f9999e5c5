/**
 * The workers' side of bench/push.ts: a child process of its own running `client.work()` as
 * `svcq work` does (prefetching, results handed in with the next claim), whose handler does what a
 * push delivery does: POSTs the item's exact text to the target and keeps its answer as the
 * result. argv[2]: `{"url","host","queue","target","concurrency"}`. Prints `READY`, starts on a
 * line on stdin, and runs until it is killed.
 */
import { createInterface } from 'node:readline';
import { Agent, request } from 'undici';
import { SvcqClient } from '../src/client/index.js';

const spec = JSON.parse(process.argv[2] ?? '') as { url: string; host: string; queue: string; target: string; concurrency: number };
const client = new SvcqClient({ url: spec.url, host: spec.host });
const agent = new Agent({ keepAliveTimeout: 10_000 });
const headers = { 'content-type': 'application/json' };

const lines = createInterface({ input: process.stdin });
lines.once('line', () => {
  client.work(
    spec.queue,
    async (_item, job) => {
      const answer = await request(spec.target, { method: 'POST', body: job.itemText, headers, dispatcher: agent });
      return (await answer.body.json()) as Record<string, unknown>;
    },
    { concurrency: spec.concurrency, prefetch: spec.concurrency, handIns: true, waitSeconds: 5 },
  );
});
console.log('READY');
