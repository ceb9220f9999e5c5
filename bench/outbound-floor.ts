/**
 * The floor under a callback's cost: the CPU one process spends sending N POSTs with undici (an
 * Agent keeping 32 connections alive, 32 in flight, the body of a status record) to a URL and
 * reading each answer, and nothing else. Run as a child by bench/callbacks.ts, which prints it
 * beside the server's CPU per job, after as many POSTs again to warm up; prints one line of JSON
 * `{ usPerPost }`.
 *
 *   node --import tsx bench/outbound-floor.ts URL N
 */
import { Agent, request } from 'undici';

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
        const answer = await request(url!, { method: 'POST', body, headers: { 'content-type': 'application/json', 'svcq-event': 'finished' }, dispatcher: agent });
        await answer.body.text();
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
