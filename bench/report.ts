/** Turns a bench run's raw figures into the printed table, the target verdicts and the JSON file. */
import chalk from 'chalk';
import type { ScheduleFigures } from './idle-schedules.js';
import Table from 'cli-table3';
import type { LoadResult } from './protocol.js';
import type { BullmqResult } from './procs.js';
import { besideVerdicts, type BesideRun } from './beside.js';

export interface RestartFigures {
  waiting: number;
  /** SIGTERM → exit. */
  stopMs: number;
  /** Spawn → `listening on`. */
  listenMs: number;
  /** Spawn → first claim that returned an item. */
  firstClaimMs: number;
  rssAfter: number;
}

export interface BacklogRun {
  size: number;
  prefill: LoadResult;
  /** Server RSS before the prefill (after a warm-up) and with `size` items waiting, in bytes. */
  rssEmpty: number;
  rssWaiting: number;
  restart: RestartFigures;
  /** RSS of a freshly started, empty server (the reference for rssAfter). */
  rssFreshEmpty: number;
  /** Per round: post and full cycle on the backlog, each paired with the same on an empty server beside it. */
  pairs: Array<{ post: Pair; cycle: Pair }>;
}

/** One phase on the backlog server and on the empty reference server, one right after the other. */
export interface Pair {
  backlog: LoadResult;
  empty: LoadResult;
}

export interface BenchRun {
  date: string;
  /** decisions §8.3: the idle server's CPU with 1,000 every-second schedules, and their lateness. */
  schedules?: ScheduleFigures;
  machine: { cpus: number; cpuModel: string; memGiB: number; node: string; os: string };
  /** The commit the server was built from, and whether src/ or commands/ differed from it. */
  build: { commit: string; dirty: boolean };
  /** 1-minute load average before and after the run: other work on the machine skews every figure. */
  load: { start: number; end: number };
  options: { sizes: number[]; durationS: number; inFlight: number; itemBytes: number; rounds: number; vs?: string };
  /** `cycle` is the median of `cycleRounds`. */
  empty: {
    post: LoadResult;
    cycle: LoadResult;
    cycleRounds: LoadResult[];
    loop: LoadResult;
    drain: LoadResult;
    latency: LoadResult;
    drainQueued: number;
    /** Full cycles with each result handed in with the next claim (decisions §3.8), paired by round with the others; raw-socket and undici clients. */
    handinRounds: LoadResult[];
    handinUndiciRounds: LoadResult[];
    /** The plain full cycle with undici clients, for comparison. */
    cycleUndiciRounds: LoadResult[];
    /** Items posted per second in batches of 1,000, and drained per second by claims of 100 with hand-ins. */
    batchPost: LoadResult;
    drainBatch: LoadResult;
  };
  /** The round paired with the median svcq round, and every round (paired by index with `empty.cycleRounds`). */
  bullmq?: BullmqResult & { jobs: number; rounds: BullmqResult[] };
  /**
   * bench/floor-server.ts under the same post load: node:http alone, and answering after an O_DSYNC
   * group write at the post phase's connections, at the cycle's (twice as many) and at 1 in flight.
   */
  floor?: { plain: LoadResult; durable: LoadResult; durableCycle: LoadResult; durableUndici?: LoadResult; durableLatency: LoadResult };
  backlogs: BacklogRun[];
  profile?: { file: string; cycle: LoadResult; top: string };
  /** `--vs rabbitmq`: svcq through its client library beside RabbitMQ's quorum queue (and BullMQ), with each server's CPU per job. */
  beside?: BesideRun;
}

export interface Row {
  phase: string;
  figure: number;
  unit: string;
  vsEmpty?: number;
  target?: string;
  pass?: boolean;
  /** The load phase behind the figure, for its CPU shares. */
  from?: LoadResult;
}

export interface Verdict {
  target: string;
  measured: string;
  pass: boolean | undefined;
}

const fmt = (n: number, digits = 0): string => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
export const sizeName = (n: number): string => (n >= 1_000_000 && n % 1_000_000 === 0 ? `${n / 1_000_000}M` : n >= 1000 && n % 1000 === 0 ? `${n / 1000}k` : String(n));

const median = (list: number[]): number => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
/** The round with the median rate (the lower middle one of an even number). */
const medianOf = (rounds: LoadResult[]): LoadResult => [...rounds].sort((a, b) => a.rate - b.rate)[Math.floor((rounds.length - 1) / 2)]!;
const list = (ratios: number[]): string => ratios.map((r) => fmt(r, 2)).join(', ');

/** svcq's full cycle (or another list of rounds) over BullMQ's, round by round. */
function bullmqRatios(run: BenchRun, ours: LoadResult[] = run.empty.cycleRounds): number[] {
  const peer = run.bullmq?.rounds ?? [];
  return ours.map((r, i) => r.rate / (peer[i]?.rate ?? Number.NaN));
}

/** The hand-in cycles against BullMQ (decisions §3.8 targets): label, rounds, target ratio. */
function handinKinds(run: BenchRun): Array<{ label: string; rounds: LoadResult[]; target: number }> {
  return [
    { label: 'full cycle with hand-ins (raw-socket clients)', rounds: run.empty.handinRounds ?? [], target: 1.3 },
    { label: 'full cycle with hand-ins (undici clients)', rounds: run.empty.handinUndiciRounds ?? [], target: 1.0 },
  ];
}

/** Backlog over empty reference, round by round, for one kind of phase. */
function pairRatios(b: BacklogRun, kind: 'post' | 'cycle'): number[] {
  return b.pairs.map((p) => p[kind].backlog.rate / p[kind].empty.rate);
}

/** The pair whose ratio is the median one (the lower middle one of an even number). */
function medianPair(b: BacklogRun, kind: 'post' | 'cycle'): Pair {
  return [...b.pairs].sort((x, y) => x[kind].backlog.rate / x[kind].empty.rate - y[kind].backlog.rate / y[kind].empty.rate)[Math.floor((b.pairs.length - 1) / 2)]![kind];
}

/** The goals from the performance issue, checked against this run; the backlog goals use its largest size. */
export function verdicts(run: BenchRun): Verdict[] {
  const out: Verdict[] = [];
  for (const v of run.beside ? besideVerdicts(run.beside) : []) out.push({ target: v.target, measured: `median of ${v.ratios.length} rounds (${list(v.ratios)}) = ${fmt(v.ratio, 2)}×`, pass: v.pass });
  if (run.bullmq) {
    const ratios = bullmqRatios(run);
    const ratio = median(ratios);
    const measured = ratios.length > 1 ? `median of ${ratios.length} paired rounds (${list(ratios)}) = ${fmt(ratio, 2)}×` : `${fmt(run.empty.cycle.rate)} / ${fmt(run.bullmq.rate)} = ${fmt(ratio, 2)}×`;
    out.push({ target: 'full cycle ≥ 0.75× BullMQ', measured, pass: ratio >= 0.75 });
    for (const k of handinKinds(run)) {
      if (k.rounds.length === 0) continue;
      const r = bullmqRatios(run, k.rounds);
      const m = median(r);
      out.push({ target: `${k.label} ≥ ${fmt(k.target, 1)}× BullMQ`, measured: r.length > 1 ? `median of ${r.length} paired rounds (${list(r)}) = ${fmt(m, 2)}×` : `${fmt(m, 2)}×`, pass: m >= k.target });
    }
  } else {
    out.push({ target: 'full cycle ≥ 0.75× BullMQ', measured: 'not run (add --vs bullmq)', pass: undefined });
  }
  if (run.empty.batchPost) out.push({ target: 'batch post of 1,000-item requests ≥ 100,000 items/s', measured: `${fmt(run.empty.batchPost.rate)} items/s`, pass: run.empty.batchPost.rate >= 100_000 });
  if (run.empty.drainBatch) out.push({ target: 'drain by claims of 100 with hand-ins ≥ 50,000 items/s', measured: `${fmt(run.empty.drainBatch.rate)} items/s`, pass: run.empty.drainBatch.rate >= 50_000 });
  const big = run.backlogs.at(-1);
  if (big) {
    const note = big.size === 1_000_000 ? '' : ` (set for 1M; run had ${sizeName(big.size)})`;
    for (const kind of ['post', 'cycle'] as const) {
      const ratios = pairRatios(big, kind);
      const ratio = median(ratios);
      const measured = ratios.length > 1 ? `median of ${ratios.length} paired rounds (${list(ratios)}) = ${fmt(ratio, 2)}×` : `${fmt(ratio, 2)}×`;
      out.push({ target: `${kind} with ${sizeName(big.size)} waiting ≥ 0.9× empty${note}`, measured, pass: ratio >= 0.9 });
    }
  }
  const p99 = run.empty.latency.latency?.p99 ?? Number.NaN;
  out.push({ target: 'post p99 at 1 in flight ≤ 2 ms', measured: `${fmt(p99, 2)} ms`, pass: p99 <= 2 });
  if (big) {
    const note = big.size === 1_000_000 ? '' : ` (set for 1M; run had ${sizeName(big.size)})`;
    const s = big.restart.firstClaimMs / 1000;
    out.push({ target: `restart with ${sizeName(big.size)} waiting ≤ 10 s${note}`, measured: `${fmt(s, 2)} s`, pass: s <= 10 });
    const perItem = (big.rssWaiting - big.rssEmpty) / big.size;
    out.push({ target: `RSS ≤ 800 B per waiting item${note}`, measured: `${fmt(perItem)} B`, pass: perItem <= 800 });
  }
  return out;
}

/** Every figure of the run as one row each. */
export function rows(run: BenchRun): Row[] {
  const { empty } = run;
  const out: Row[] = [
    { phase: `post, ${run.options.inFlight} in flight, empty queue`, figure: empty.post.rate, unit: 'posts/s', from: empty.post },
    {
      phase: `full cycle: ${run.options.inFlight} producers posting, ${run.options.inFlight} workers claiming → result${empty.cycleRounds.length > 1 ? ` (median of ${empty.cycleRounds.map((r) => fmt(r.rate)).join(', ')})` : ''}`,
      figure: empty.cycle.rate,
      unit: 'cycles/s',
      from: empty.cycle,
    },
    ...[
      ['full cycle with hand-ins: claim carries the last result, 2 requests per job', empty.handinRounds],
      ['full cycle with hand-ins, undici as producer and worker client', empty.handinUndiciRounds],
      ['full cycle (3 requests per job), undici as producer and worker client', empty.cycleUndiciRounds],
    ]
      .filter(([, r]) => (r as LoadResult[] | undefined)?.length)
      .map(([label, r]) => {
        const list = r as LoadResult[];
        const m = medianOf(list);
        return { phase: `${label as string}${list.length > 1 ? ` (median of ${list.map((x) => fmt(x.rate)).join(', ')})` : ''}`, figure: m.rate, unit: 'cycles/s', from: m };
      }),
    ...(empty.batchPost ? [{ phase: 'batch posts of 1,000 items, 4 in flight', figure: empty.batchPost.rate, unit: 'items/s', target: '≥ 100,000/s', pass: empty.batchPost.rate >= 100_000, from: empty.batchPost }] : []),
    ...(empty.drainBatch ? [{ phase: `drain of ${fmt(empty.drainBatch.count)} by claims of 100 with hand-ins, 4 in flight`, figure: empty.drainBatch.rate, unit: 'items/s', target: '≥ 50,000/s', pass: empty.drainBatch.rate >= 50_000, from: empty.drainBatch }] : []),
    { phase: `post → claim → result in turn, ${run.options.inFlight} loops (not a target)`, figure: empty.loop.rate, unit: 'cycles/s', from: empty.loop },
    { phase: `drain (claim→result) of ${fmt(empty.drainQueued)} queued, ${run.options.inFlight} in flight`, figure: empty.drain.rate, unit: 'items/s', from: empty.drain },
  ];
  const lat = empty.latency.latency;
  if (lat) {
    out.push({ phase: `post latency p50, 1 in flight (${fmt(lat.n)} posts)`, figure: lat.p50, unit: 'ms', from: empty.latency });
    out.push({ phase: 'post latency p99, 1 in flight', figure: lat.p99, unit: 'ms', target: '≤ 2 ms', pass: lat.p99 <= 2 });
    out.push({ phase: 'post latency max, 1 in flight', figure: lat.max, unit: 'ms' });
  }
  if (run.bullmq) {
    const ratios = bullmqRatios(run);
    const ratio = median(ratios);
    const several = ratios.length > 1;
    const peerRates = run.bullmq.rounds.map((r) => r.rate);
    out.push({ phase: `BullMQ full cycle: ${run.options.inFlight} producers, a Worker of concurrency ${run.options.inFlight}, ${fmt(run.bullmq.jobs)} jobs (Redis AOF everysec)${several ? ` (median of ${peerRates.map((r) => fmt(r)).join(', ')})` : ''}`, figure: median(peerRates), unit: 'cycles/s' });
    out.push({ phase: `svcq cycle / BullMQ cycle${several ? `, median of paired rounds (${list(ratios)})` : ''}`, figure: ratio, unit: '×', target: '≥ 0.75×', pass: ratio >= 0.75 });
    for (const k of handinKinds(run)) {
      if (k.rounds.length === 0) continue;
      const r = bullmqRatios(run, k.rounds);
      const m = median(r);
      out.push({ phase: `svcq ${k.label} / BullMQ cycle${r.length > 1 ? `, median of paired rounds (${list(r)})` : ''}`, figure: m, unit: '×', target: `≥ ${fmt(k.target, 1)}×`, pass: m >= k.target });
    }
  }
  if (run.floor) {
    const { plain, durable, durableCycle, durableLatency } = run.floor;
    const n = run.options.inFlight;
    out.push({ phase: `floor: bare node:http handler, ${n} in flight`, figure: plain.rate, unit: 'req/s', from: plain });
    out.push({ phase: `floor: the same answering after an O_DSYNC group write, ${n} in flight`, figure: durable.rate, unit: 'req/s', from: durable });
    out.push({ phase: `floor: the same, ${2 * n} in flight (the cycle's connections), ÷ 3 requests per cycle`, figure: durableCycle.rate / 3, unit: 'cycles/s', from: durableCycle });
    out.push({ phase: `floor: the same, ${2 * n} in flight, ÷ 2 requests per hand-in cycle`, figure: durableCycle.rate / 2, unit: 'cycles/s', from: durableCycle });
    // What the hand-in cycle with undici could reach on a server that does nothing but answer durably: its ceiling here.
    if (run.floor.durableUndici) out.push({ phase: `floor: the same, ${2 * n} in flight, undici clients, ÷ 2 requests per hand-in cycle`, figure: run.floor.durableUndici.rate / 2, unit: 'cycles/s', from: run.floor.durableUndici });
    const lat = durableLatency.latency;
    if (lat) out.push({ phase: `floor: the same at 1 in flight, p50 / p99 ${fmt(lat.p50, 2)} / ${fmt(lat.p99, 2)} ms`, figure: lat.p99, unit: 'ms', from: durableLatency });
  }
  const largest = run.backlogs.at(-1)?.size;
  for (const b of run.backlogs) {
    const n = sizeName(b.size);
    const judged = b.size === largest;
    const perItem = (b.rssWaiting - b.rssEmpty) / b.size;
    out.push({ phase: `prefill ${n} (64 in flight, not a target)`, figure: b.prefill.rate, unit: 'posts/s', from: b.prefill });
    for (const [kind, label, unit] of [['post', 'post', 'posts/s'], ['cycle', 'full cycle', 'cycles/s']] as const) {
      const ratios = pairRatios(b, kind);
      const ratio = median(ratios);
      const pair = medianPair(b, kind);
      const rounds = ratios.length > 1 ? ` (median pair; ratios ${list(ratios)})` : '';
      out.push({ phase: `${label} with ${n} waiting${rounds}`, figure: pair.backlog.rate, unit, from: pair.backlog, vsEmpty: ratio, ...(judged ? { target: '≥ 0.9× empty', pass: ratio >= 0.9 } : {}) });
      out.push({ phase: `${label}, empty server beside it (paired)`, figure: pair.empty.rate, unit, from: pair.empty });
    }
    out.push({ phase: `restart with ${n} waiting: SIGTERM → exit`, figure: b.restart.stopMs / 1000, unit: 's' });
    out.push({ phase: `restart with ${n} waiting: start → listening`, figure: b.restart.listenMs / 1000, unit: 's' });
    out.push({ phase: `restart with ${n} waiting: start → first claim`, figure: b.restart.firstClaimMs / 1000, unit: 's', ...(judged ? { target: '≤ 10 s', pass: b.restart.firstClaimMs <= 10_000 } : {}) });
    out.push({ phase: `server RSS, empty (after warm-up)`, figure: b.rssEmpty / 2 ** 20, unit: 'MiB' });
    out.push({ phase: `server RSS with ${n} waiting`, figure: b.rssWaiting / 2 ** 20, unit: 'MiB' });
    out.push({ phase: `RSS per waiting item (${n})`, figure: perItem, unit: 'B/item', ...(judged ? { target: '≤ 800 B', pass: perItem <= 800 } : {}) });
    out.push({ phase: `RSS per waiting item after restart (${n}, vs fresh empty)`, figure: (b.restart.rssAfter - b.rssFreshEmpty) / b.size, unit: 'B/item' });
  }
  if (run.profile) out.push({ phase: 'full cycle under --cpu-prof (not a target)', figure: run.profile.cycle.rate, unit: 'cycles/s', from: run.profile.cycle });
  return out;
}

/** CPU time of server and load generator as a share of the phase's wall time (100% = one core). */
function cpu(r: LoadResult | undefined): string {
  if (!r || r.serverCpuMs === undefined) return '';
  return `${Math.round((100 * r.serverCpuMs) / r.elapsedMs)}% / ${Math.round((100 * r.clientCpuMs) / r.elapsedMs)}%`;
}

function figureText(row: Row): string {
  if (row.unit === 'ms') return fmt(row.figure, 2);
  if (row.unit === 's' || row.unit === '×') return fmt(row.figure, 2);
  if (row.unit === 'MiB') return fmt(row.figure, 1);
  return fmt(row.figure);
}

export function renderTable(run: BenchRun): string {
  const table = new Table({
    head: ['phase', 'figure', 'unit', 'vs empty', 'target', 'CPU srv/load'].map((h) => chalk.bold(h)),
    colAligns: ['left', 'right', 'left', 'right', 'left', 'right'],
    // No colours of its own: chalk decides, so piped output stays plain text.
    style: { head: [], border: [], compact: true },
  });
  for (const row of rows(run)) {
    const verdict = row.pass === undefined ? '' : row.pass ? chalk.green(' pass') : chalk.red(' FAIL');
    table.push([row.phase, figureText(row), row.unit, row.vsEmpty === undefined ? '' : `${fmt(row.vsEmpty, 2)}×`, row.target ? `${row.target}${verdict}` : '', cpu(row.from)]);
  }
  const lines = [table.toString(), '', chalk.bold('Targets')];
  for (const v of verdicts(run)) {
    const mark = v.pass === undefined ? chalk.yellow('n/a ') : v.pass ? chalk.green('pass') : chalk.red('FAIL');
    lines.push(`  ${mark}  ${v.target}: ${v.measured}`);
  }
  const errors = [...(run.floor ? [run.floor.plain, run.floor.durable, run.floor.durableCycle, ...(run.floor.durableUndici ? [run.floor.durableUndici] : []), run.floor.durableLatency] : []), run.empty.post, ...run.empty.cycleRounds, run.empty.loop, run.empty.drain, run.empty.latency, ...run.backlogs.flatMap((b) => [b.prefill, ...b.pairs.flatMap((p) => [p.post.backlog, p.post.empty, p.cycle.backlog, p.cycle.empty])])].filter((r) => r.errors > 0);
  for (const r of errors) lines.push(chalk.red(`  ${r.errors} failed requests in a ${r.mode} phase; first: ${r.firstError ?? '?'}`));
  return lines.join('\n');
}

/** Two phases run one right after the other in one round: `a` over `b` is the round's ratio. */
export interface Duo {
  a: LoadResult;
  b: LoadResult;
}

/**
 * Priorities and delays (decisions §8.1). `priority`: on one server, post and the full cycle with
 * every item given a random priority of `levels` (a) against the same without options (b), paired by
 * round. `backlogPrio`: post, full cycle and claim → result (a: with `waiting` items across `levels`
 * priorities and `delayed` items delayed far into the future; b: an empty reference server beside
 * it), every post carrying a random priority on both sides, paired by round in slices.
 */
export interface PrioRun {
  priority?: { levels: number; rounds: Array<{ post: Duo; cycle: Duo }> };
  backlogPrio?: { levels: number; waiting: number; delayed: number; seedMs: number; rounds: Array<{ post: Duo; cycle: Duo; claim: Duo }> };
}

const spread = (ratios: number[]): string => `${fmt(Math.min(...ratios), 3)}–${fmt(Math.max(...ratios), 3)}`;

/** The §8.1 phases: one line per kind with the median ratio, its spread and each round's, and the target. */
export function prioVerdicts(run: PrioRun): Verdict[] {
  const out: Verdict[] = [];
  const line = (target: string, rounds: Duo[], unit: string): void => {
    const ratios = rounds.map((d) => d.a.rate / d.b.rate);
    const m = median(ratios);
    const rates = `${fmt(median(rounds.map((d) => d.a.rate)))} vs ${fmt(median(rounds.map((d) => d.b.rate)))} ${unit}/s`;
    // Server CPU per item, the steadier figure on a busy machine: the inverse ratio, so that above 1 is better here too.
    const perItem = (x: LoadResult): number => (x.serverCpuMs ?? Number.NaN) / Math.max(1, x.count);
    const cpu = rounds.map((d) => perItem(d.b) / perItem(d.a));
    out.push({ target, measured: `${fmt(m, 3)}× (rounds ${list(ratios)}; spread ${spread(ratios)}; medians ${rates}); server CPU per item, inverse ratio ${fmt(median(cpu), 3)}× (rounds ${list(cpu)})`, pass: m >= 0.9 });
  };
  if (run.priority) {
    const p = run.priority;
    line(`posts with a random priority of ${p.levels} ≥ 0.9× plain posts`, p.rounds.map((r) => r.post), 'posts');
    line(`full cycle with a random priority of ${p.levels} ≥ 0.9× the plain cycle`, p.rounds.map((r) => r.cycle), 'jobs');
  }
  if (run.backlogPrio) {
    const b = run.backlogPrio;
    const with_ = `${sizeName(b.waiting)} waiting across ${b.levels} priorities + ${sizeName(b.delayed)} delayed`;
    line(`posts, ${with_} ≥ 0.9× empty`, b.rounds.map((r) => r.post), 'posts');
    line(`full cycle, ${with_} ≥ 0.9× empty`, b.rounds.map((r) => r.cycle), 'jobs');
    line(`claim → result, ${with_} ≥ 0.9× a queue holding only what is claimed`, b.rounds.map((r) => r.claim), 'jobs');
  }
  return out;
}

export function renderPrio(run: PrioRun): string {
  const lines = [chalk.bold('Priorities and delays (decisions §8.1)')];
  if (run.backlogPrio) lines.push(`  seeded ${fmt(run.backlogPrio.waiting + run.backlogPrio.delayed)} items by batch posts in ${fmt(run.backlogPrio.seedMs / 1000, 1)} s`);
  for (const v of prioVerdicts(run)) lines.push(`  ${v.pass ? chalk.green('pass') : chalk.red('FAIL')}  ${v.target}: ${v.measured}`);
  const all = [...(run.priority?.rounds ?? []).flatMap((r) => [r.post, r.cycle]), ...(run.backlogPrio?.rounds ?? []).flatMap((r) => [r.post, r.cycle, r.claim])].flatMap((d) => [d.a, d.b]);
  for (const r of all.filter((x) => x.errors > 0)) lines.push(chalk.red(`  ${r.errors} failed requests in a ${r.mode} phase; first: ${r.firstError ?? '?'}`));
  return lines.join('\n');
}
