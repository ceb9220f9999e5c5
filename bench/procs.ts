/**
 * Child processes of a bench run: the svcq server, load generators, Redis and the BullMQ and
 * RabbitMQ drivers (and the pid of the RabbitMQ server already running on the machine).
 * Every child is registered so that an error or Ctrl-C still ends all of them.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { RESULT_PREFIX, type LoadResult, type LoadSpec } from './protocol.js';

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(BENCH_DIR, '..');
let BIN = path.join(REPO, 'bin/run.js');

/**
 * Copies the built server (bin, dist, package.json; node_modules linked) into `dir` and runs every
 * later server from there, so a rebuild of dist/ in the working tree during a long run cannot
 * change the code under test halfway.
 */
export function snapshotBuild(dir: string): void {
  mkdirSync(dir, { recursive: true });
  for (const part of ['bin', 'dist', 'package.json']) cpSync(path.join(REPO, part), path.join(dir, part), { recursive: true });
  symlinkSync(path.join(REPO, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  BIN = path.join(dir, 'bin/run.js');
}

const live = new Set<ChildProcess>();

function track(proc: ChildProcess): ChildProcess {
  live.add(proc);
  proc.once('exit', () => live.delete(proc));
  return proc;
}

/** SIGKILLs every child still running (the last resort on error or interrupt). */
export function killAll(): void {
  for (const proc of live) {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  }
  live.clear();
}

/** Keeps the tail of a child's output for error messages without letting a pipe fill up. */
function collect(proc: ChildProcess, limit = 64 * 1024): () => string {
  let out = '';
  const add = (c: Buffer): void => {
    out += c.toString();
    if (out.length > limit) out = out.slice(-limit);
  };
  proc.stdout?.on('data', add);
  proc.stderr?.on('data', add);
  return () => out;
}

function waitForLine(proc: ChildProcess, output: () => string, pattern: RegExp, timeoutMs: number, what: string): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      proc.stdout?.off('data', check);
      proc.off('exit', exited);
    };
    const check = (): void => {
      const m = pattern.exec(output());
      if (m) {
        done();
        resolve(m);
      }
    };
    const exited = (code: number | null, signal: string | null): void => {
      done();
      reject(new Error(`${what} exited (${code ?? signal}) before it was ready:\n${output()}`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`${what} was not ready within ${timeoutMs / 1000} s:\n${output()}`));
    }, timeoutMs);
    proc.stdout?.on('data', check);
    proc.once('exit', exited);
    check();
  });
}

export interface Svcq {
  url: string;
  pid: number;
  /** Milliseconds from spawn to the `listening on` line. */
  startMs: number;
  /** performance.now() of the orchestrator when the process was spawned. */
  spawnedAt: number;
  /** Server RSS in bytes, from /proc/<pid>/status. */
  rss(): number;
  /** CPU time (user + system) the server has used so far, in ms, from /proc/<pid>/stat. */
  cpuMs(): number;
  /** SIGTERM and wait for the exit; resolves to the milliseconds it took. */
  stop(): Promise<number>;
  /** The tail of what the server printed so far (for error messages). */
  output(): string;
}

export interface SvcqOptions {
  root: string;
  masterToken: string;
  /** Extra node flags for the server process (e.g. --cpu-prof). */
  nodeArgs?: string[];
  /** Extra `svcq serve` flags (e.g. --push-allow). */
  args?: string[];
  startTimeoutMs?: number;
}

/** Spawns `svcq serve` on `root` with a free port and waits for its `listening on` line. */
export async function startSvcq(options: SvcqOptions): Promise<Svcq> {
  const t0 = performance.now();
  const proc = track(
    spawn(process.execPath, [...(options.nodeArgs ?? []), BIN, 'serve', '--root', options.root, '--port', '0', '--bind', '127.0.0.1', '--master-token', options.masterToken, ...(options.args ?? [])], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const output = collect(proc);
  const m = await waitForLine(proc, output, /listening on (http:\/\/\S+)/, options.startTimeoutMs ?? 120_000, 'svcq serve');
  const startMs = performance.now() - t0;
  return {
    url: m[1]!,
    pid: proc.pid!,
    startMs,
    spawnedAt: t0,
    rss: () => rssOf(proc.pid!),
    cpuMs: () => cpuMsOf(proc.pid!),
    stop: stopper(proc, output, 'svcq serve'),
    output,
  };
}

/**
 * SIGTERM and wait for the exit (SIGKILL after 120 s); resolves to the milliseconds it took, and
 * fails with the child's output unless it exited 0.
 */
function stopper(proc: ChildProcess, output: () => string, what: string): () => Promise<number> {
  const exited = new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) resolve();
    else proc.once('exit', () => resolve());
  });
  return async () => {
    const t = performance.now();
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 120_000);
    await exited;
    clearTimeout(timer);
    if (proc.exitCode !== 0) throw new Error(`${what} exited with ${proc.exitCode ?? proc.signalCode} on SIGTERM:\n${output()}`);
    return performance.now() - t;
  };
}

/** Spawns bench/floor-server.ts (see there) and waits for its `listening on` line; `stop` ends it. */
export async function startFloor(options: { durable: boolean; dir: string }): Promise<Pick<Svcq, 'url' | 'cpuMs' | 'stop'>> {
  const proc = track(spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, 'floor-server.ts'), JSON.stringify(options)], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] }));
  const output = collect(proc);
  const m = await waitForLine(proc, output, /listening on (http:\/\/\S+)/, 30_000, 'floor server');
  return { url: m[1]!, cpuMs: () => cpuMsOf(proc.pid!), stop: stopper(proc, output, 'floor server') };
}

export function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]) * 1024;
}

// Linux reports /proc/<pid>/stat times in clock ticks of 1/100 s on every common build.
const TICK_MS = 10;

export function cpuMsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start at its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
}

/** Runs a node script under tsx as a child, and parses its `BENCH-RESULT` line. */
async function runChild<T>(script: string, arg: unknown, timeoutMs: number): Promise<T> {
  const proc = track(spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, script), JSON.stringify(arg)], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] }));
  const output = collect(proc);
  let line = '';
  let buffered = '';
  proc.stdout!.on('data', (c: Buffer) => {
    buffered += c.toString();
    const at = buffered.indexOf(RESULT_PREFIX);
    if (at >= 0 && buffered.indexOf('\n', at) > 0) line = buffered.slice(at + RESULT_PREFIX.length, buffered.indexOf('\n', at));
    else if (at < 0) buffered = buffered.slice(-RESULT_PREFIX.length);
  });
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  if (code !== 0 || !line) throw new Error(`${script} failed (exit ${code ?? proc.signalCode}${code === null ? `, limit ${timeoutMs / 1000} s` : ''}):\n${output()}`);
  return JSON.parse(line) as T;
}

/** One load phase in its own process. The hard limit leaves room for start-up and the last requests. */
export function runLoad(spec: LoadSpec, hardLimitMs = spec.durationMs + 60_000): Promise<LoadResult> {
  return runChild<LoadResult>('load.ts', spec, hardLimitMs);
}

export interface BullmqSpec {
  redisPort: number;
  jobs: number;
  inFlight: number;
  itemBytes: number;
  timeoutMs: number;
  /** The server process (redis-server) whose CPU time the driver reads at its first add and at its last completion. */
  cpuPid?: number;
}

export interface BullmqResult {
  completed: number;
  added: number;
  elapsedMs: number;
  rate: number;
  timedOut: boolean;
  /** CPU time (user + system) of `cpuPid` over exactly the measured window, in ms. */
  serverCpuMs?: number;
  /** The driver's own CPU time over the same window, in ms. */
  clientCpuMs?: number;
}

export function runBullmq(spec: BullmqSpec): Promise<BullmqResult> {
  return runChild<BullmqResult>('bullmq-load.ts', spec, spec.timeoutMs + 60_000);
}

/** A free TCP port on 127.0.0.1 (closed again before it is returned). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * The full cycle through a server's client library (bench/svcq-client-load.ts) or against
 * RabbitMQ (bench/rabbitmq-load.ts): `inFlight` producers send `jobs` items while a worker of
 * concurrency `inFlight` returns a result for each; the driver reads `cpuPid`'s CPU time at its
 * first post and at its last result.
 */
export interface CycleSpec {
  jobs: number;
  inFlight: number;
  itemBytes: number;
  timeoutMs: number;
  cpuPid: number;
  /** svcq: the server's base URL; RabbitMQ: the amqp:// URL. */
  url: string;
  /** svcq: the queue domain (Host header). */
  host?: string;
  /** svcq: a queue defined for this round; RabbitMQ: the name of the quorum queue to declare (and delete afterwards). */
  queue: string;
}

export interface CycleResult {
  completed: number;
  posted: number;
  errors: number;
  firstError?: string;
  elapsedMs: number;
  rate: number;
  timedOut: boolean;
  serverCpuMs: number;
  clientCpuMs: number;
}

export function runSvcqClient(spec: CycleSpec): Promise<CycleResult> {
  return runChild<CycleResult>('svcq-client-load.ts', spec, spec.timeoutMs + 60_000);
}

export function runRabbitmq(spec: CycleSpec): Promise<CycleResult> {
  return runChild<CycleResult>('rabbitmq-load.ts', spec, spec.timeoutMs + 60_000);
}

/**
 * The pid of the RabbitMQ node running on this machine (its beam.smp process, the one whose
 * command line boots `rabbit`), or undefined when none runs.
 */
export function rabbitmqPid(): number | undefined {
  let out: string;
  try {
    out = execFileSync('pgrep', ['-f', 'beam.smp'], { encoding: 'utf8' });
  } catch {
    // pgrep exits 1 when nothing matches.
    return undefined;
  }
  const pids = out.split('\n').filter(Boolean).map(Number);
  return pids.find((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes('-s rabbit boot');
    } catch {
      return false;
    }
  });
}

export interface Redis {
  port: number;
  pid: number;
  stop(): Promise<void>;
}

/**
 * A private redis-server with AOF fsynced every second (BullMQ's usual durable set-up), on its
 * own port and folder so a shared Redis on 6379 is never touched.
 */
export async function startRedis(dir: string): Promise<Redis> {
  const port = await freePort();
  const proc = track(
    spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--appendonly', 'yes', '--appendfsync', 'everysec', '--dir', dir, '--save', '', '--daemonize', 'no'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  const output = collect(proc);
  await waitForLine(proc, output, /Ready to accept connections/, 20_000, 'redis-server');
  return {
    port,
    pid: proc.pid!,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
