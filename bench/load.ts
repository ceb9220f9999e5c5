/**
 * The load generator: a child process of its own, so the server never shares an event loop with
 * the traffic it answers. Reads a LoadSpec (JSON) from argv[2], drives the queue over keep-alive
 * HTTP with `inFlight` concurrent loops, prints one `BENCH-RESULT {…}` line and exits.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { makeItem, RESULT_PREFIX, summarise, type LoadResult, type LoadSpec } from './protocol.js';

const spec = JSON.parse(process.argv[2] ?? '') as LoadSpec;
const base = new URL(spec.url);
if (base.hostname !== '127.0.0.1') throw new Error(`the load generator only talks to 127.0.0.1, not ${base.hostname}`);

const agent = new http.Agent({ keepAlive: true, maxSockets: spec.inFlight, maxFreeSockets: spec.inFlight, scheduling: 'fifo' });
const port = Number(base.port);
const postPath = `/${spec.queue}`;
const claimPath = `/${spec.queue}/claim`;

interface Reply {
  status: number;
  text: string;
}

function send(path: string, body: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        agent,
        host: '127.0.0.1',
        port,
        method: 'POST',
        path,
        headers: { host: spec.host, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

let started = 0;
let count = 0;
let errors = 0;
let empties = 0;
let firstError: string | undefined;
const latencies: number[] = [];
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const deadline = t0 + spec.durationMs;
// A dead server turns every request into an instant error: give up rather than spin.
const maxErrors = 1000;

function more(): boolean {
  return started < spec.maxCount && errors < maxErrors && performance.now() < deadline;
}

function fail(what: string): void {
  errors++;
  firstError ??= what.slice(0, 300);
}

async function post(): Promise<boolean> {
  const seq = started;
  const t = spec.recordLatency ? performance.now() : 0;
  const reply = await send(postPath, makeItem(seq, spec.itemBytes));
  if (spec.recordLatency && spec.mode !== 'cycle') latencies.push(performance.now() - t);
  if (reply.status !== 200) {
    fail(`post: ${reply.status} ${reply.text}`);
    return false;
  }
  return true;
}

/** Claims one item and posts its result; false when the queue had nothing. */
async function claimAndFinish(worker: string): Promise<boolean | 'error'> {
  const claim = await send(claimPath, `{"worker":"${worker}"}`);
  if (claim.status !== 200) {
    fail(`claim: ${claim.status} ${claim.text}`);
    return 'error';
  }
  const body = JSON.parse(claim.text) as { ok: boolean; empty?: boolean; id?: string };
  if (body.empty) {
    empties++;
    return false;
  }
  const result = await send(`/${spec.queue}/items/${body.id}/result`, '{"output":"done"}');
  if (result.status !== 200 || !(JSON.parse(result.text) as { accepted?: boolean }).accepted) {
    fail(`result: ${result.status} ${result.text}`);
    return 'error';
  }
  return true;
}

async function loop(index: number): Promise<void> {
  const worker = `bench-${process.pid}-${index}`;
  while (more()) {
    started++;
    try {
      switch (spec.mode) {
        case 'post':
        case 'prefill':
        case 'latency':
          if (await post()) count++;
          break;
        case 'cycle': {
          const t = spec.recordLatency ? performance.now() : 0;
          if (!(await post())) break;
          if ((await claimAndFinish(worker)) === true) {
            count++;
            if (spec.recordLatency) latencies.push(performance.now() - t);
          }
          break;
        }
        case 'drain': {
          const done = await claimAndFinish(worker);
          if (done === true) count++;
          // An empty queue ends this loop: the drain is over.
          else if (done === false) return;
          break;
        }
      }
    } catch (err) {
      fail(`network: ${(err as Error).message}`);
    }
  }
}

await Promise.all(Array.from({ length: spec.inFlight }, (_, i) => loop(i)));
const elapsedMs = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
agent.destroy();

const result: LoadResult = {
  mode: spec.mode,
  count,
  errors,
  empties,
  elapsedMs,
  rate: elapsedMs > 0 ? (count * 1000) / elapsedMs : 0,
  clientCpuMs: (cpu.user + cpu.system) / 1000,
  latency: spec.recordLatency ? summarise(Float64Array.from(latencies)) : undefined,
  firstError,
};
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
