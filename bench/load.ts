/**
 * The load generator: a child process of its own, so the server never shares an event loop with
 * the traffic it answers. Reads a LoadSpec (JSON) from argv[2], drives the queue over keep-alive
 * HTTP with `inFlight` concurrent loops, prints one `BENCH-RESULT {…}` line and exits.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { Client } from 'undici';
import { BATCH_SIZE, CLAIM_MAX, makeItem, RESULT_PREFIX, summarise, type LoadResult, type LoadSpec } from './protocol.js';
import { cpuMsOf } from './procs.js';

const spec = JSON.parse(process.argv[2] ?? '') as LoadSpec;
const targets = (spec.urls ?? [spec.url]).map((u) => new URL(u));
for (const t of targets) if (t.hostname !== '127.0.0.1') throw new Error(`the load generator only talks to 127.0.0.1, not ${t.hostname}`);

// A minimal HTTP/1.1 client on raw keep-alive sockets: one connection per loop, one request in
// flight on each. node:http's client (and even undici's) costs more CPU per request than the
// server's whole handling of it, and the load generator shares the machine's two cores with the
// server, so a heavy client would measure itself.
const postPath = `/${spec.queue}`;
const batchPath = `/${spec.queue}/batch`;
// Post options (decisions §8.1), when the phase uses them: a fresh random priority for each request.
const withOptions = spec.priorities !== undefined || spec.delayS !== undefined;
const optionsQuery = (): string => {
  const parts: string[] = [];
  if (spec.priorities !== undefined) parts.push(`priority=${Math.floor(Math.random() * spec.priorities)}`);
  if (spec.delayS !== undefined) parts.push(`delay=${spec.delayS}`);
  return `?${parts.join('&')}`;
};
const claimPath = `/${spec.queue}/claim`;

interface Reply {
  status: number;
  text: string;
}

/** One keep-alive connection with at most one request in flight. */
interface Sender {
  send(path: string, body: string): Promise<Reply>;
  close(): void;
}

/** The same over undici (the client inside Node's fetch): what a Node program speaking to svcq would use. */
class UndiciConnection implements Sender {
  private readonly client: Client;
  private readonly headers = { host: spec.host, 'content-type': 'application/json' };

  constructor(target: URL) {
    this.client = new Client(target.origin, { pipelining: 1, keepAliveTimeout: 60_000 });
  }

  async send(path: string, body: string): Promise<Reply> {
    outstanding++;
    try {
      const res = await this.client.request({ path, method: 'POST', headers: this.headers, body });
      return { status: res.statusCode, text: await res.body.text() };
    } finally {
      outstanding--;
    }
  }

  close(): void {
    void this.client.destroy();
  }
}

/** Connections go to the targets in turn (producers and workers alike, when there are several nodes). */
let made = 0;
const connect = (): Sender => {
  const target = targets[made++ % targets.length]!;
  return spec.client === 'undici' ? new UndiciConnection(target) : new Connection(Number(target.port));
};

class Connection implements Sender {
  private socket: net.Socket;
  private buffer: Buffer = Buffer.alloc(0);
  private closed = false;
  private pending: { resolve: (r: Reply) => void; reject: (e: Error) => void } | undefined;

  constructor(private readonly port: number) {
    this.socket = this.connect();
  }

  private connect(): net.Socket {
    const socket = net.connect(this.port, '127.0.0.1');
    socket.setNoDelay(true);
    // A replaced socket's late events must not touch the request of the one after it.
    socket.on('data', (chunk: Buffer) => socket === this.socket && this.onData(chunk));
    socket.on('error', (err) => socket === this.socket && this.fail(err));
    socket.on('close', () => socket === this.socket && this.fail(new Error('connection closed')));
    this.buffer = Buffer.alloc(0);
    return socket;
  }

  send(path: string, body: string): Promise<Reply> {
    // A connection that failed (its request counted as an error) is replaced: a write to a
    // destroyed socket would never be answered, and the phase would hang.
    if (this.closed) return Promise.reject(new Error('connection closed'));
    if (this.socket.destroyed) this.socket = this.connect();
    outstanding++;
    return new Promise<Reply>((resolve, reject) => {
      this.pending = { resolve, reject };
      this.socket.write(`POST ${path} HTTP/1.1\r\nhost: ${spec.host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    }).finally(() => outstanding--);
  }

  private onData(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const headEnd = this.buffer.indexOf('\r\n\r\n');
    if (headEnd === -1) return;
    const head = this.buffer.toString('latin1', 0, headEnd);
    const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.buffer.length < headEnd + 4 + length) return;
    const text = this.buffer.toString('utf8', headEnd + 4, headEnd + 4 + length);
    this.buffer = this.buffer.subarray(headEnd + 4 + length);
    const pending = this.pending;
    this.pending = undefined;
    pending?.resolve({ status: Number(head.slice(9, 12)), text });
  }

  private fail(err: Error): void {
    const pending = this.pending;
    this.pending = undefined;
    pending?.reject(err);
  }

  close(): void {
    this.closed = true;
    this.socket.destroy();
  }
}

let started = 0;
let count = 0;
let errors = 0;
let empties = 0;
let firstError: string | undefined;
const latencies: number[] = [];
const cpu0 = process.cpuUsage();
const serverCpu0 = spec.cpuPid === undefined ? 0 : cpuMsOf(spec.cpuPid);
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

async function post(conn: Sender): Promise<boolean> {
  const seq = started;
  const t = spec.recordLatency ? performance.now() : 0;
  const reply = await conn.send(withOptions ? postPath + optionsQuery() : postPath, makeItem(seq, spec.itemBytes));
  if (spec.recordLatency && spec.mode !== 'loop') latencies.push(performance.now() - t);
  if (reply.status !== 200) {
    fail(`post: ${reply.status} ${reply.text}`);
    return false;
  }
  return true;
}

/** Claims one item and posts its result; false when the queue had nothing. */
async function claimAndFinish(conn: Sender, worker: string, waitS = 0): Promise<boolean | 'error'> {
  const claim = await conn.send(claimPath, waitS > 0 ? `{"worker":"${worker}","wait":${waitS}}` : `{"worker":"${worker}"}`);
  if (claim.status !== 200) {
    fail(`claim: ${claim.status} ${claim.text}`);
    return 'error';
  }
  const body = JSON.parse(claim.text) as { ok: boolean; empty?: boolean; id?: string };
  if (body.empty) {
    empties++;
    return false;
  }
  const result = await conn.send(`/${spec.queue}/items/${body.id}/result`, '{"output":"done"}');
  if (result.status !== 200 || !(JSON.parse(result.text) as { accepted?: boolean }).accepted) {
    fail(`result: ${result.status} ${result.text}`);
    return 'error';
  }
  return true;
}

/** Posts BATCH_SIZE items in one request; the number created, or -1 on an error. */
async function postBatch(conn: Sender): Promise<number> {
  const seq = started;
  const items: string[] = [];
  for (let i = 0; i < BATCH_SIZE; i++) items.push(makeItem(seq * BATCH_SIZE + i, spec.itemBytes));
  const reply = await conn.send(withOptions ? batchPath + optionsQuery() : batchPath, `[${items.join(',')}]`);
  if (reply.status !== 200) {
    fail(`batch: ${reply.status} ${reply.text}`);
    return -1;
  }
  let created = 0;
  for (const e of (JSON.parse(reply.text) as { items: Array<{ ok: boolean }> }).items) if (e.ok) created++;
  return created;
}

/**
 * One claim that hands in `done` (ids whose results go with it, decisions §3.8) and claims up to
 * `max` items (one without): the ids claimed, and how many hand-ins were accepted.
 */
async function claimWithDone(conn: Sender, worker: string, done: string[], max: number | undefined, waitS: number): Promise<{ ids: string[]; accepted: number } | 'error'> {
  const doneJson = done.length > 0 ? `,"done":[${done.map((id) => `{"id":"${id}","result":{"output":"done"}}`).join(',')}]` : '';
  const claim = await conn.send(claimPath, `{"worker":"${worker}"${waitS > 0 ? `,"wait":${waitS}` : ''}${max === undefined ? '' : `,"max":${max}`}${doneJson}}`);
  if (claim.status !== 200) {
    fail(`claim: ${claim.status} ${claim.text}`);
    return 'error';
  }
  const body = JSON.parse(claim.text) as { empty?: boolean; id?: string; items?: Array<{ id: string }>; done?: Array<{ ok: boolean; accepted?: boolean }> };
  let accepted = 0;
  for (const d of body.done ?? []) if (d.ok && d.accepted) accepted++;
  if (accepted !== done.length) fail(`hand-in: ${done.length - accepted} of ${done.length} not accepted: ${claim.text.slice(0, 200)}`);
  const ids = body.items ? body.items.map((i) => i.id) : body.empty ? [] : [body.id!];
  if (ids.length === 0) empties++;
  return { ids, accepted };
}

const connections = Array.from({ length: spec.inFlight }, () => connect());

// For the orchestrator's error message should this process have to be killed: that it got this
// far, and, well past its deadline, what it is still waiting for.
let outstanding = 0;
process.stderr.write(`load ${spec.mode}: started with ${spec.inFlight} connections\n`);
setTimeout(() => {
  process.stderr.write(`load ${spec.mode}: 10 s past the deadline, ${outstanding} requests still unanswered (${started} started, ${count} done, ${errors} errors${firstError ? `, the first: ${firstError}` : ''})\n`);
}, spec.durationMs + 10_000).unref();

/** One loop per connection for every mode but `cycle`. */
async function loop(index: number): Promise<void> {
  const worker = `bench-${process.pid}-${index}`;
  const conn = connections[index]!;
  while (more()) {
    started++;
    try {
      switch (spec.mode) {
        case 'post':
        case 'prefill':
        case 'latency':
          if (await post(conn)) count++;
          break;
        case 'batch-post': {
          const created = await postBatch(conn);
          if (created > 0) count += created;
          break;
        }
        case 'drain-batch': {
          // Each loop hands in what it claimed last with its next claim, until the queue is empty.
          // With claimWaitS (a rate limit's drain), claims wait to be let through until the
          // deadline, and the count is of items leased before it.
          const waitS = spec.claimWaitS ?? 0;
          let held: string[] = [];
          for (;;) {
            const got = await claimWithDone(conn, worker, held, CLAIM_MAX, waitS);
            if (got === 'error') return;
            held = got.ids;
            if (waitS === 0) {
              count += got.accepted;
              if (held.length === 0) return;
            } else {
              if (performance.now() < deadline) count += held.length;
              if (!more()) return;
            }
          }
        }
        case 'loop': {
          const t = spec.recordLatency ? performance.now() : 0;
          if (!(await post(conn))) break;
          if ((await claimAndFinish(conn, worker)) === true) {
            count++;
            if (spec.recordLatency) latencies.push(performance.now() - t);
          }
          break;
        }
        case 'drain': {
          const done = await claimAndFinish(conn, worker, spec.claimWaitS ?? 0);
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

/**
 * `cycle`: producers and workers apart, as in a deployment and as BullMQ's driver runs them: each
 * producer connection posts in a loop until `maxCount` items are posted, each worker connection
 * long-polls a claim and posts the result. Ends when `maxCount` results are accepted (or at the
 * deadline); the rate is results per second from the first post to the last result.
 */
let lastResultAt = 0;
async function cycle(): Promise<void> {
  const workers = Array.from({ length: spec.inFlight }, () => connect());
  // Set when the phase is over, by the timer or by the last result: a timer may fire a fraction of
  // a millisecond before performance.now() reaches the deadline, and the claims its end cuts off
  // must not count as errors then.
  let stopped = false;
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => (finish = () => ((stopped = true), resolve())));
  const ended = (): boolean => stopped || count >= spec.maxCount || errors >= maxErrors || performance.now() >= deadline;
  const pace = spec.postsPerSecond;
  const producer = async (conn: Sender): Promise<void> => {
    while (more()) {
      if (pace !== undefined) {
        const wait = t0 + (started * 1000) / pace - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        if (!more()) break;
      }
      started++;
      try {
        await post(conn);
      } catch (err) {
        fail(`network: ${(err as Error).message}`);
      }
    }
  };
  const worker = async (conn: Sender, index: number): Promise<void> => {
    const name = `bench-${process.pid}-w${index}`;
    // `handin`: the item this worker holds, whose result goes in with its next claim.
    let held: string[] = [];
    while (!ended()) {
      try {
        if (spec.mode === 'handin') {
          // Once every item is posted, a claim that hands the last ones in does not wait for more.
          const got = await claimWithDone(conn, name, held, undefined, held.length > 0 && started >= spec.maxCount ? 0 : 1);
          if (got === 'error') continue;
          held = got.ids;
          if (got.accepted > 0 && performance.now() < deadline) {
            count += got.accepted;
            lastResultAt = performance.now();
            if (count >= spec.maxCount) finish();
          }
        } else if ((await claimAndFinish(conn, name, 1)) === true && performance.now() < deadline) {
          count++;
          lastResultAt = performance.now();
          if (count >= spec.maxCount) finish();
        }
      } catch (err) {
        // The connections close under waiting claims once the phase is over: that is no error.
        if (!ended()) fail(`network: ${(err as Error).message}`);
      }
    }
    finish();
  };
  const timer = setTimeout(finish, Math.max(0, deadline - performance.now()));
  const running = [...connections.map((c) => producer(c)), ...workers.map((c, i) => worker(c, i))];
  await finished;
  clearTimeout(timer);
  for (const w of workers) w.close();
  await Promise.all(running);
}

if (spec.mode === 'cycle' || spec.mode === 'handin') await cycle();
else await Promise.all(Array.from({ length: spec.inFlight }, (_, i) => loop(i)));
// A cycle phase is measured up to its last result (or its deadline).
const elapsedMs = spec.mode === 'cycle' || spec.mode === 'handin' ? (count >= spec.maxCount ? lastResultAt : Math.min(performance.now(), deadline)) - t0 : performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
const serverCpuMs = spec.cpuPid === undefined ? undefined : cpuMsOf(spec.cpuPid) - serverCpu0;
for (const c of connections) c.close();

const result: LoadResult = {
  mode: spec.mode,
  count,
  errors,
  empties,
  elapsedMs,
  rate: elapsedMs > 0 ? (count * 1000) / elapsedMs : 0,
  clientCpuMs: (cpu.user + cpu.system) / 1000,
  serverCpuMs,
  latency: spec.recordLatency ? summarise(Float64Array.from(latencies)) : undefined,
  firstError,
};
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
