/**
 * How long svcq takes to start, beside a bare `node -e 0` timed in the same rounds:
 *
 *   node --import tsx bench/startup.ts [--runs N] [--warmup N] [DIR ...]
 *
 * Each DIR is a checkout with a built `dist/` and its node_modules (default: this one); several
 * are compared side by side, taking turns within every round. Each round times, one after the
 * other: `node -e 0`; `svcq --version`; `svcq queues` against a server (started once, from the
 * first DIR, with three queues defined); and `svcq serve --port 0` up to its `listening on` line
 * (the server is then stopped, untimed), on a new root (it creates the master token, the store
 * and the day-files, each synced to disk) and restarted on a root with three queue definitions
 * (which it validates before it listens) that a first start, untimed, left. Every figure is a
 * wall-clock time from spawn to exit (to the line, for serve), so the process start that
 * `node -e 0` pays is in each. Reported per case: the median, the middle half and the extremes,
 * and the median over the median of every `node -e 0` run.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

function option(name: string, fallback: number): number {
  const at = process.argv.indexOf(name);
  if (at === -1) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} takes a whole number, not ${JSON.stringify(process.argv[at + 1])}`);
  process.argv.splice(at, 2);
  return value;
}

const runs = option('--runs', 15);
const warmup = option('--warmup', 2);
const dirs = (process.argv.length > 2 ? process.argv.slice(2) : [REPO]).map((d) => path.resolve(d));
const temp = mkdtempSync(path.join(tmpdir(), 'svcq-startup-'));

interface Timed {
  ms: number;
  output: string;
}

/** Runs `node ARGS` to its exit; the time from spawn to exit. A non-zero exit is an error. */
function timeRun(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<Timed> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const proc = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (output += c.toString()));
    proc.once('error', reject);
    proc.once('close', (code) => {
      const ms = performance.now() - started;
      if (code === 0) resolve({ ms, output });
      else reject(new Error(`node ${args.join(' ')} exited ${code}: ${output}`));
    });
  });
}

/** Starts `svcq serve` on `root`; resolves at its `listening on` line with the time to it, the URL and a stop. */
function startServe(dir: string, root: string, extra: string[] = []): Promise<{ ms: number; url: string; output: () => string; stop: () => Promise<void> }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const proc = spawn(process.execPath, [path.join(dir, 'bin/run.js'), 'serve', '--root', root, '--port', '0', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let listening = false;
    const exited = new Promise<void>((done) => proc.once('close', () => done()));
    proc.stdout.on('data', (c: Buffer) => {
      output += c.toString();
      const m = /listening on (\S+)/.exec(output);
      if (m && !listening) {
        listening = true;
        const ms = performance.now() - started;
        resolve({
          ms,
          url: m[1]!,
          output: () => output,
          stop: async () => {
            proc.kill('SIGTERM');
            await exited;
          },
        });
      }
    });
    proc.stderr.on('data', (c: Buffer) => (output += c.toString()));
    proc.once('error', reject);
    void exited.then(() => {
      if (!listening) reject(new Error(`svcq serve exited before it listened: ${output}`));
    });
  });
}

/** A root with three queues of one host defined, as `svcq queues` lists them. */
function definedRoot(root: string): string {
  const defs = path.join(root, 'jobs.example.com/svc-queues');
  mkdirSync(defs, { recursive: true });
  for (const name of ['thumbnails', 'mail', 'reports']) writeFileSync(path.join(defs, `${name}.json`), '{"leaseSeconds":30}\n');
  return root;
}

/** The value below which a fraction `q` of `xs` lies (linear between neighbours). */
function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const at = (s.length - 1) * q;
  const lo = Math.floor(at);
  return s[lo]! + (s[Math.min(lo + 1, s.length - 1)]! - s[lo]!) * (at - lo);
}

const CASES = ['node -e 0', 'svcq --version', 'svcq queues', 'svcq serve, new root', 'svcq serve, restart, 3 queues'] as const;
type Case = (typeof CASES)[number];

async function main(): Promise<void> {
  process.stdout.write(`load average at start: ${loadavg().map((l) => l.toFixed(2)).join(' ')}; ${runs} rounds after ${warmup} warm-up rounds; ${dirs.length} checkout(s)\n`);
  const token = 'startup-bench-master-token-0123456789abcdef';
  const server = await startServe(dirs[0]!, definedRoot(path.join(temp, 'served')), ['--master-token', token]);
  const env = { ...process.env, SVCQ_URL: server.url, SVCQ_TOKEN: token };
  const times = dirs.map(() => new Map<Case, number[]>(CASES.map((c) => [c, []])));
  try {
    for (let round = 0; round < warmup + runs; round++) {
      // Take turns: the checkout that goes first changes from round to round.
      const order = dirs.map((_, i) => (i + round) % dirs.length);
      for (const d of order) {
        const dir = dirs[d]!;
        const bin = path.join(dir, 'bin/run.js');
        const base = (await timeRun(['-e', '0'])).ms;
        const version = (await timeRun([bin, '--version'])).ms;
        const queues = await timeRun([bin, 'queues'], env);
        if (!queues.output.includes('thumbnails')) throw new Error(`svcq queues did not list the queues: ${queues.output}`);
        const root = path.join(temp, `serve-${round}-${d}`);
        const fresh = await startServe(dir, root);
        await fresh.stop();
        // A restart: the root holds the master token, the store and the day-files of a first start.
        const defined = definedRoot(`${root}-defined`);
        await (await startServe(dir, defined)).stop();
        const restart = await startServe(dir, defined);
        await restart.stop();
        rmSync(root, { recursive: true, force: true });
        rmSync(defined, { recursive: true, force: true });
        if (round < warmup) continue;
        const figures: Record<Case, number> = { 'node -e 0': base, 'svcq --version': version, 'svcq queues': queues.ms, 'svcq serve, new root': fresh.ms, 'svcq serve, restart, 3 queues': restart.ms };
        for (const c of CASES) times[d]!.get(c)!.push(figures[c]);
      }
    }
  } finally {
    await server.stop();
    rmSync(temp, { recursive: true, force: true });
  }
  // `node -e 0` is the same program whichever checkout it is timed beside: the ratios divide by
  // the median of all its runs.
  const node = quantile(times.flatMap((t) => t.get('node -e 0')!), 0.5);
  process.stdout.write('\n| case | checkout | median ms | middle half (p25–p75) | fastest–slowest | median ÷ median of node -e 0 |\n|---|---|---:|---:|---:|---:|\n');
  for (const c of CASES) {
    dirs.forEach((dir, d) => {
      const t = times[d]!.get(c)!;
      const mid = quantile(t, 0.5);
      process.stdout.write(`| ${c} | ${path.basename(dir)} | ${mid.toFixed(0)} | ${quantile(t, 0.25).toFixed(0)}–${quantile(t, 0.75).toFixed(0)} | ${Math.min(...t).toFixed(0)}–${Math.max(...t).toFixed(0)} | ${(mid / node).toFixed(2)}× |\n`);
    });
  }
}

await main();
