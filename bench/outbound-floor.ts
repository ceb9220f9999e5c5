/**
 * The floor under a callback's cost: the CPU one process spends sending N POSTs (an undici Agent
 * keeping 32 connections alive, 32 in flight, the body of a status record) to a URL and reading
 * each answer, and nothing else. Each POST goes out as the server sends a callback's
 * (src/push/send.ts: undici's dispatch with a handler of its own, the leanest way undici offers;
 * its `request` costs more per call), so that the floor is the POST alone, not a heavier client. Run as a child by bench/callbacks.ts, which prints it
 * beside the server's CPU per job, after as many POSTs again to warm up; prints one line of JSON
 * `{ usPerPost }`.
 *
 *   node --import tsx bench/outbound-floor.ts URL N
 */
import { Agent } from 'undici';
import { send as post } from '../src/push/send.js';

const [url, count] = process.argv.slice(2);
const n = Number(count);
const agent = new Agent({ connections: 32 });
const body = JSON.stringify({ id: '0123456789abcdef', status: 'finished', postedBy: 'bench', postedAt: Date.now(), updatedAt: Date.now(), finishedAt: Date.now(), attempts: 1, priority: 0, group: null, runAt: null, progress: null, result: { ok: true }, error: null });
/** Sends `count` POSTs, 32 at a time. */
async function send(count: number): Promise<void> {
  let sent = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (sent < count) {
        sent++;
        const answer = await post(url!, body, { 'content-type': 'application/json', 'svcq-event': 'finished' }, { timeoutMs: 30_000, maxBytes: 200, dispatcher: agent });
        if (answer.reason !== null) throw new Error(`the receiver did not take a POST: ${answer.reason}`);
      }
    }),
  );
}
// Warmed up first, as the server is by its warm-up phases: a fresh process's first thousands of
// requests run unoptimised code and would count twice what a running server pays.
await send(Math.max(2000, n));
const cpu0 = process.cpuUsage();
await send(n);
const cpu = process.cpuUsage(cpu0);
process.stdout.write(`${JSON.stringify({ usPerPost: (cpu.user + cpu.system) / n })}\n`);
await agent.close();
