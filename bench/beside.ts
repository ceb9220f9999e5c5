/**
 * `--vs rabbitmq[,bullmq]`: the full cycle (post, claim, result per job) on svcq through its own
 * client library, on RabbitMQ's quorum queue (the node already running on this machine) and on
 * BullMQ (a private redis-server), in rounds whose order rotates, with each server's CPU time per
 * job. Every driver reads its server's /proc/<pid>/stat utime + stime at its first post and at its
 * last result, so the figure is the server's CPU over exactly the measured window.
 */
import chalk from 'chalk';
import { cpuMsOf, rabbitmqPid, runBullmq, runLoad, runRabbitmq, runSvcqClient, startRedis, type CycleResult, type Svcq } from './procs.js';

export type System = 'svcq' | 'rabbitmq' | 'bullmq';
export type SvcqDriver = 'client' | 'handin';

export interface BesideFigure {
  completed: number;
  elapsedMs: number;
  /** Jobs per second, first post to last result. */
  rate: number;
  /** The server process's CPU (user + system) over that window, in ms, and per job in µs. */
  serverCpuMs: number;
  cpuUsPerJob: number;
  /** The driver's own CPU over that window, per job in µs (the client library's cost, and the generator's). */
  clientCpuUsPerJob: number;
  errors: number;
  firstError?: string;
  timedOut: boolean;
}

export interface BesideRun {
  jobs: number;
  inFlight: number;
  itemBytes: number;
  systems: System[];
  /** How svcq was driven: its client library (`client.post()` and `client.work()`), or the bench's own hand-in loop over raw sockets (bench/load.ts). */
  svcqDriver: SvcqDriver;
  /** Each round's figures, in the order the systems ran in that round. */
  rounds: Array<{ order: System[]; figures: Partial<Record<System, BesideFigure>> }>;
  /** Each server's CPU while nobody drives it, in ms per second (measured over a few seconds after the warm-ups, before the rounds). */
  idleCpuMsPerS: Partial<Record<System, number>>;
  rabbitmqVersion?: string;
}

export interface BesideOptions {
  systems: System[];
  svcqDriver: SvcqDriver;
  jobs: number;
  inFlight: number;
  itemBytes: number;
  rounds: number;
  /** amqp:// URL of the RabbitMQ node. */
  amqpUrl: string;
  /** A running svcq server and a function that defines a fresh queue on it. */
  svcq: Pick<Svcq, 'url' | 'pid'>;
  host: string;
  defineQueue(name: string): Promise<void>;
  /** A folder for the private redis-server. */
  redisDir: string;
  log(line: string): void;
}

const TIMEOUT_MS = 120_000;
const WARM_UP_JOBS = 4000;

function figure(r: CycleResult): BesideFigure {
  return {
    completed: r.completed,
    elapsedMs: r.elapsedMs,
    rate: r.rate,
    serverCpuMs: r.serverCpuMs,
    cpuUsPerJob: (r.serverCpuMs * 1000) / Math.max(1, r.completed),
    clientCpuUsPerJob: (r.clientCpuMs * 1000) / Math.max(1, r.completed),
    errors: r.errors,
    firstError: r.firstError,
    timedOut: r.timedOut,
  };
}

async function idleRate(pid: number, ms: number): Promise<number> {
  const c0 = cpuMsOf(pid);
  await new Promise((resolve) => setTimeout(resolve, ms));
  return ((cpuMsOf(pid) - c0) * 1000) / ms;
}

export async function runBeside(o: BesideOptions): Promise<BesideRun> {
  const rabbitPid = o.systems.includes('rabbitmq') ? rabbitmqPid() : undefined;
  if (o.systems.includes('rabbitmq') && rabbitPid === undefined) throw new Error('--vs rabbitmq: no RabbitMQ node (a beam.smp process booting rabbit) runs on this machine');
  const redis = o.systems.includes('bullmq') ? await startRedis(o.redisDir) : undefined;
  try {
    let queues = 0;
    const one = async (system: System, jobs: number): Promise<BesideFigure> => {
      const base = { jobs, inFlight: o.inFlight, itemBytes: o.itemBytes, timeoutMs: TIMEOUT_MS };
      const queue = `beside-${process.pid}-${queues++}`;
      if (system === 'svcq') {
        await o.defineQueue(queue);
        if (o.svcqDriver === 'client') return figure(await runSvcqClient({ ...base, cpuPid: o.svcq.pid, url: o.svcq.url, host: o.host, queue }));
        const r = await runLoad({ mode: 'handin', url: o.svcq.url, host: o.host, queue, inFlight: o.inFlight, durationMs: TIMEOUT_MS, maxCount: jobs, itemBytes: o.itemBytes, recordLatency: false, cpuPid: o.svcq.pid });
        return figure({ ...r, completed: r.count, posted: r.count, timedOut: r.count < jobs, serverCpuMs: r.serverCpuMs ?? Number.NaN });
      }
      if (system === 'rabbitmq') return figure(await runRabbitmq({ ...base, cpuPid: rabbitPid!, url: o.amqpUrl, queue }));
      const r = await runBullmq({ ...base, redisPort: redis!.port, cpuPid: redis!.pid });
      return figure({ ...r, posted: r.added, errors: 0, serverCpuMs: r.serverCpuMs ?? Number.NaN, clientCpuMs: r.clientCpuMs ?? Number.NaN });
    };
    for (const s of o.systems) await one(s, WARM_UP_JOBS);
    const pids: Partial<Record<System, number>> = { svcq: o.svcq.pid, rabbitmq: rabbitPid, bullmq: redis?.pid };
    const idleCpuMsPerS: BesideRun['idleCpuMsPerS'] = {};
    for (const s of o.systems) idleCpuMsPerS[s] = await idleRate(pids[s]!, 5000);
    o.log(`idle server CPU, ms per s: ${o.systems.map((s) => `${s} ${idleCpuMsPerS[s]!.toFixed(1)}`).join(', ')}`);
    const run: BesideRun = { jobs: o.jobs, inFlight: o.inFlight, itemBytes: o.itemBytes, systems: o.systems, svcqDriver: o.svcqDriver, rounds: [], idleCpuMsPerS };
    for (let r = 0; r < o.rounds; r++) {
      // The order rotates, so that over as many rounds as systems each runs once in every place.
      const order = o.systems.map((_, i) => o.systems[(i + r) % o.systems.length]!);
      const figures: Partial<Record<System, BesideFigure>> = {};
      for (const s of order) {
        const f = await one(s, o.jobs);
        figures[s] = f;
        const trouble = f.errors || f.timedOut ? chalk.red(` (${f.errors} errors${f.timedOut ? ', TIMED OUT' : ''}; first: ${f.firstError ?? '-'})`) : '';
        o.log(`beside, round ${r + 1} of ${o.rounds}: ${s} ${Math.round(f.rate).toLocaleString('en-US')} jobs/s, server CPU ${f.cpuUsPerJob.toFixed(1)} µs/job, driver ${f.clientCpuUsPerJob.toFixed(1)} µs/job (${f.completed} in ${(f.elapsedMs / 1000).toFixed(2)} s)${trouble}`);
      }
      run.rounds.push({ order, figures });
    }
    return run;
  } finally {
    await redis?.stop();
  }
}

const median = (list: number[]): number => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/** One system's figure over another's, round by round (each pair from the same round). */
export function besideRatios(run: BesideRun, a: System, b: System, what: 'rate' | 'cpuUsPerJob'): number[] {
  return run.rounds.map((r) => r.figures[a]![what] / r.figures[b]![what]);
}

export interface BesideSummary {
  system: System;
  rates: number[];
  cpus: number[];
  rate: number;
  cpuUsPerJob: number;
  clientCpuUsPerJob: number;
}

export function besideSummary(run: BesideRun): BesideSummary[] {
  return run.systems.map((system) => {
    const list = run.rounds.map((r) => r.figures[system]!);
    return {
      system,
      rates: list.map((f) => f.rate),
      cpus: list.map((f) => f.cpuUsPerJob),
      rate: median(list.map((f) => f.rate)),
      cpuUsPerJob: median(list.map((f) => f.cpuUsPerJob)),
      clientCpuUsPerJob: median(list.map((f) => f.clientCpuUsPerJob)),
    };
  });
}

/** The targets against RabbitMQ: label, the median of the round ratios, the rounds' ratios, pass. */
export function besideVerdicts(run: BesideRun): Array<{ target: string; ratios: number[]; ratio: number; pass: boolean }> {
  if (!run.systems.includes('rabbitmq')) return [];
  const rate = besideRatios(run, 'svcq', 'rabbitmq', 'rate');
  const cpu = besideRatios(run, 'svcq', 'rabbitmq', 'cpuUsPerJob');
  return [
    { target: `full cycle (${run.svcqDriver === 'client' ? 'client library' : "the bench's hand-in loop"}) ≥ 1.5× RabbitMQ quorum queue, jobs/s`, ratios: rate, ratio: median(rate), pass: median(rate) >= 1.5 },
    { target: 'server CPU per job ≤ 0.5× RabbitMQ quorum queue', ratios: cpu, ratio: median(cpu), pass: median(cpu) <= 0.5 },
  ];
}

const NAMES: Record<System, string> = { svcq: 'svcq', rabbitmq: 'RabbitMQ quorum queue (amqplib)', bullmq: 'BullMQ (Redis AOF everysec)' };
const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** The printed section: per system the median cycles/s and server CPU µs/job (each round's in brackets), then the ratios. */
export function renderBeside(run: BesideRun): string {
  const lines = [chalk.bold(`Beside ${run.systems.filter((s) => s !== 'svcq').join(' and ')}: full cycle of ${fmt(run.jobs)} jobs, ${run.inFlight} in flight, ${run.rounds.length} round${run.rounds.length === 1 ? "" : "s"} in rotating order (median, each round's in brackets)`)];
  for (const s of besideSummary(run)) {
    const name = s.system === 'svcq' ? `svcq (${run.svcqDriver === 'client' ? 'client.post + client.work' : "the bench's hand-in loop"})` : NAMES[s.system];
    lines.push(`  ${name.padEnd(36)} ${fmt(s.rate).padStart(7)} jobs/s (${s.rates.map((x) => fmt(x)).join(', ')})   server CPU ${fmt(s.cpuUsPerJob, 1).padStart(6)} µs/job (${s.cpus.map((x) => fmt(x, 1)).join(', ')})   driver ${fmt(s.clientCpuUsPerJob, 1)} µs/job   idle ${fmt(run.idleCpuMsPerS[s.system] ?? Number.NaN, 1)} ms/s`);
  }
  for (const other of run.systems.filter((s) => s !== 'svcq')) {
    const rate = besideRatios(run, 'svcq', other, 'rate');
    const cpu = besideRatios(run, 'svcq', other, 'cpuUsPerJob');
    lines.push(`  svcq / ${other}: jobs/s ${fmt(median(rate), 2)}× (${rate.map((x) => fmt(x, 2)).join(', ')}), server CPU per job ${fmt(median(cpu), 2)}× (${cpu.map((x) => fmt(x, 2)).join(', ')})`);
  }
  for (const v of besideVerdicts(run)) lines.push(`  ${v.pass ? chalk.green('pass') : chalk.red('FAIL')}  ${v.target}: ${fmt(v.ratio, 2)}× (${v.ratios.map((x) => fmt(x, 2)).join(', ')})`);
  return lines.join('\n');
}
