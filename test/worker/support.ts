import { spawn, type ChildProcess } from 'node:child_process';
import { expect } from 'chai';
import { request } from '../support/http.js';
import { BIN, type TestServer } from '../support/server.js';

/** The queue domain the worker and producer tests use. */
export const HOST = 'jobs.test';

let counter = 0;
/** A queue name no other test uses. */
export function queueName(prefix: string): string {
  return `${prefix}-${process.pid}-${++counter}`;
}

/** Puts a public queue definition through the management API. */
export async function defineQueue(server: TestServer, name: string, def: Record<string, unknown> = {}): Promise<void> {
  const body = JSON.stringify({ access: { post: 'public', fetch: 'public', work: 'public' }, ...def });
  const reply = await request(server.url, `/api/v2/def?path=${encodeURIComponent(`${HOST}/svc-queues/${name}.json`)}`, { method: 'PUT', token: server.masterToken, body });
  expect(reply.status, reply.text).to.equal(200);
}

export async function postItem(server: TestServer, queue: string, item: Record<string, unknown>): Promise<string> {
  const reply = await request(server.url, `/${queue}`, { method: 'POST', host: HOST, body: JSON.stringify(item) });
  expect(reply.status, reply.text).to.equal(200);
  return (reply.json as { id: string }).id;
}

export interface ItemStatus {
  id: string;
  status: string;
  attempts: number;
  postedAt: number;
  priority: number;
  group: string | null;
  runAt: number | null;
  progress: unknown;
  result: unknown;
  error: unknown;
}

export async function getItem(server: TestServer, queue: string, id: string): Promise<ItemStatus> {
  const reply = await request(server.url, `/${queue}/items/${id}`, { host: HOST });
  expect(reply.status, reply.text).to.equal(200);
  return reply.json as ItemStatus;
}

/** Long-polls the item until it is terminal (decisions §3.6), for at most `seconds`. */
export async function waitTerminal(server: TestServer, queue: string, id: string, seconds = 15): Promise<ItemStatus> {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const reply = await request(server.url, `/${queue}/items/${id}?wait=${Math.min(5, seconds)}`, { host: HOST });
    const item = reply.json as ItemStatus;
    if (['finished', 'failed', 'timedout', 'cancelled'].includes(item.status)) return item;
    if (Date.now() > deadline) throw new Error(`item ${id} still ${item.status} after ${seconds} s`);
  }
}

/** Polls `check` every 25 ms until it returns true, failing after `ms`. */
export async function until(check: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface WorkerEventLine {
  event: string;
  id?: string;
  [key: string]: unknown;
}

/** A running `svcq work` process whose JSON event lines (stdout is a pipe) are collected. */
export interface WorkerProcess {
  proc: ChildProcess;
  events: WorkerEventLine[];
  stderr(): string;
  exited: Promise<number | null>;
  /** Resolves once an event passes `match`. */
  waitEvent(match: (e: WorkerEventLine) => boolean, what: string, ms?: number): Promise<WorkerEventLine>;
}

/**
 * Spawns the built `svcq work QUEUE` against the server, with `--wait 1` (unless `args` set it) so a stop is quick.
 * `detached` puts the worker in a process group of its own, as a shell puts a foreground job, so a
 * test can signal the whole group the way a terminal's Ctrl-C does.
 */
export function startWorker(server: TestServer | { url: string }, queue: string, args: string[], env: Record<string, string> = {}, options: { detached?: boolean } = {}): WorkerProcess {
  const wait = args.includes('--wait') ? [] : ['--wait', '1'];
  const proc = spawn(process.execPath, [BIN, 'work', queue, '--url', server.url, '--host', HOST, ...wait, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  });
  const events: WorkerEventLine[] = [];
  let partial = '';
  let err = '';
  proc.stdout!.on('data', (c: Buffer) => {
    const lines = (partial + c.toString()).split('\n');
    partial = lines.pop()!;
    for (const line of lines) if (line.trim()) events.push(JSON.parse(line) as WorkerEventLine);
  });
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return {
    proc,
    events,
    stderr: () => err,
    exited,
    async waitEvent(match, what, ms = 10_000) {
      await until(() => events.some(match) || proc.exitCode !== null, what, ms);
      const found = events.find(match);
      if (!found) throw new Error(`worker exited (${proc.exitCode}) before ${what}; stderr:\n${err}`);
      return found;
    },
  };
}

/** Stops a worker that a test left running (a failed test must not leave processes behind). */
export async function killWorker(w: WorkerProcess | undefined): Promise<void> {
  if (!w || w.proc.exitCode !== null || w.proc.signalCode !== null) return;
  w.proc.kill('SIGKILL');
  await w.exited;
}
