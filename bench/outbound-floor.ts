/**
 * The floor under a callback's cost: the CPU one process spends sending N POSTs (an undici Agent
 * keeping 32 connections alive, 32 in flight, the body of a status record) to a URL and reading
 * each answer, and nothing else. Each POST goes out as the server sends a callback's
 * (src/push/send.ts: undici's dispatch with a handler of its own, the leanest way undici offers;
 * its `request` costs more per call), so that the floor is the POST alone, not a heavier client. Run as a child by bench/callbacks.ts, which prints it
 * beside the server's CPU per job, after as many POSTs again to warm up; prints one line of JSON
 * `{ usPerPost }`.
 *
 * With RATE, the POSTs go out at that many a second instead, each when its time comes (checked
 * every millisecond), whatever is still under way: as a server sends callbacks while items end,
 * a few at a time, so that most answers wake the process for themselves. At 32 in flight, one
 * wake-up reads many answers; one at a time, a POST cost this process three times as much.
 *
 *   node --import tsx bench/outbound-floor.ts URL N [IN_FLIGHT=32] [RATE]
 */
import { Agent } from 'undici';
import { send as post } from '../src/push/send.js';

const [url, count, inFlightArg, rateArg] = process.argv.slice(2);
const n = Number(count);
const inFlight = Number(inFlightArg ?? 32);
const rate = rateArg === undefined ? undefined : Number(rateArg);
const agent = new Agent({ connections: inFlight });
const body = JSON.stringify({ id: '0123456789abcdef', status: 'finished', postedBy: 'bench', postedAt: Date.now(), updatedAt: Date.now(), finishedAt: Date.now(), attempts: 1, priority: 0, group: null, runAt: null, progress: null, result: { ok: true }, error: null });
/** Sends `count` POSTs, `inFlight` at a time. */
async function send(count: number): Promise<void> {
  let sent = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (sent < count) {
        sent++;
        const answer = await post(url!, body, { 'content-type': 'application/json', 'svcq-event': 'finished' }, { timeoutMs: 30_000, maxBytes: 200, dispatcher: agent });
        if (answer.reason !== null) throw new Error(`the receiver did not take a POST: ${answer.reason}`);
      }
    }),
  );
}
/** Sends `count` POSTs at `perSecond`, each when its time comes, and waits for every answer. */
async function paced(count: number, perSecond: number): Promise<void> {
  const answers: Array<Promise<void>> = [];
  const started = performance.now();
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const due = Math.min(count, Math.floor(((performance.now() - started) * perSecond) / 1000));
      while (answers.length < due) {
        answers.push(
          post(url!, body, { 'content-type': 'application/json', 'svcq-event': 'finished' }, { timeoutMs: 30_000, maxBytes: 200, dispatcher: agent }).then((answer) => {
            if (answer.reason !== null) throw new Error(`the receiver did not take a POST: ${answer.reason}`);
          }),
        );
      }
      if (answers.length === count) {
        clearInterval(timer);
        resolve();
      }
    }, 1);
  });
  await Promise.all(answers);
}
const run = (count: number): Promise<void> => (rate === undefined ? send(count) : paced(count, rate));
// Warmed up first, as the server is by its warm-up phases: a fresh process's first thousands of
// requests run unoptimised code and would count twice what a running server pays.
await run(Math.max(2000, n));
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await run(n);
const cpu = process.cpuUsage(cpu0);
let idleUs = 0;
if (rate !== undefined) {
  // What the millisecond checks cost on their own, over as long: taken out of the POSTs' share.
  const ms = performance.now() - t0;
  const idle0 = process.cpuUsage();
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      if (performance.now() - t0 - ms < ms) return;
      clearInterval(timer);
      resolve();
    }, 1);
  });
  const idle = process.cpuUsage(idle0);
  idleUs = idle.user + idle.system;
}
process.stdout.write(`${JSON.stringify({ usPerPost: (cpu.user + cpu.system - idleUs) / n })}\n`);
await agent.close();
