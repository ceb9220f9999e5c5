import * as asciichart from 'asciichart';
import chalk from 'chalk';
import type { CoreTimes } from '../stats.js';
import { humanBytes, parseJsonLines } from './format.js';

/** One stats day-file line: `ts` in ms and the fields of its type. */
export type StatLine = { ts: number } & Record<string, unknown>;

/** A metric drawn over the day: one or two series that share a chart and a unit. */
export interface Chart {
  title: string;
  /** Sample times in ms, one per point. */
  times: number[];
  series: Array<{ label: string; values: number[] }>;
  /** Formats an axis value. */
  format: (value: number) => string;
}

/** The samples of a day-file; a line torn by a crash or otherwise unreadable is skipped. */
export function parseSamples(text: string): StatLine[] {
  return parseJsonLines(text).filter((v): v is StatLine => typeof v === 'object' && v !== null && typeof (v as { ts?: unknown }).ts === 'number');
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : NaN;
}

/** Per-second rates between consecutive cumulative counters; a counter that went back (a reboot) gives no point. */
function rates(lines: StatLine[], field: string): { times: number[]; values: number[] } {
  const times: number[] = [];
  const values: number[] = [];
  for (let i = 1; i < lines.length; i++) {
    const dt = (lines[i]!.ts - lines[i - 1]!.ts) / 1000;
    const dv = num(lines[i]![field]) - num(lines[i - 1]![field]);
    if (!(dt > 0) || !(dv >= 0)) continue;
    times.push(lines[i]!.ts);
    values.push(dv / dt);
  }
  return { times, values };
}

function coreSums(cores: unknown): { busy: number; total: number } | undefined {
  if (!Array.isArray(cores)) return undefined;
  let busy = 0;
  let total = 0;
  for (const c of cores as CoreTimes[]) {
    busy += num(c.user) + num(c.nice) + num(c.sys) + num(c.irq);
    total += num(c.user) + num(c.nice) + num(c.sys) + num(c.irq) + num(c.idle);
  }
  return Number.isFinite(total) ? { busy, total } : undefined;
}

const percent = (v: number): string => `${v.toFixed(0)} %`;
const bytes = (v: number): string => humanBytes(Math.round(v));
const bytesPerSecond = (v: number): string => `${humanBytes(Math.round(v))}/s`;

/** The chart of one stats type's day (`cpu`, `memory`, `disk`, `diskio`, `netio`). */
export function chartOf(type: string, lines: StatLine[]): Chart {
  switch (type) {
    case 'cpu': {
      const times: number[] = [];
      const values: number[] = [];
      for (let i = 1; i < lines.length; i++) {
        const a = coreSums(lines[i - 1]!.cores);
        const b = coreSums(lines[i]!.cores);
        if (!a || !b || !(b.total > a.total)) continue;
        times.push(lines[i]!.ts);
        values.push((100 * (b.busy - a.busy)) / (b.total - a.total));
      }
      return { title: 'CPU busy, all cores', times, series: [{ label: 'busy', values }], format: percent };
    }
    case 'memory':
      return { title: 'Memory', times: lines.map((l) => l.ts), series: [{ label: 'used', values: lines.map((l) => num(l.used)) }, { label: 'available', values: lines.map((l) => num(l.available)) }], format: bytes };
    case 'disk':
      return { title: `Disk ${typeof lines[0]?.path === 'string' ? lines[0].path : '/'}`, times: lines.map((l) => l.ts), series: [{ label: 'used', values: lines.map((l) => num(l.used)) }, { label: 'free', values: lines.map((l) => num(l.free)) }], format: bytes };
    case 'diskio': {
      const read = rates(lines, 'readBytes');
      const written = rates(lines, 'writeBytes');
      return { title: 'Disk I/O', times: read.times, series: [{ label: 'read', values: read.values }, { label: 'written', values: written.values }], format: bytesPerSecond };
    }
    case 'netio': {
      const rx = rates(lines, 'rxBytes');
      const tx = rates(lines, 'txBytes');
      return { title: 'Network I/O', times: rx.times, series: [{ label: 'received', values: rx.values }, { label: 'sent', values: tx.values }], format: bytesPerSecond };
    }
    default:
      return { title: type, times: [], series: [], format: String };
  }
}

/** Averages `values` into at most `width` buckets so a day of samples fits a terminal. */
export function downsample(values: number[], width: number): number[] {
  if (values.length <= width) return values;
  const out: number[] = [];
  for (let b = 0; b < width; b++) {
    const from = Math.floor((b * values.length) / width);
    const to = Math.floor(((b + 1) * values.length) / width);
    const bucket = values.slice(from, to).filter(Number.isFinite);
    out.push(bucket.length ? bucket.reduce((s, v) => s + v, 0) / bucket.length : NaN);
  }
  return out;
}

function hhmm(ms: number): string {
  const d = new Date(ms);
  return `${String(d.getHours()).padStart(2, '0')}:${String(d.getMinutes()).padStart(2, '0')}`;
}

const COLORS = [asciichart.green, asciichart.magenta];
const CHALKS = [chalk.green, chalk.magenta];

/** Draws a chart with asciichart: a title with the latest values, the plot, and the time span under it. */
export function renderChart(chart: Chart, columns = 80): string {
  const heading = chalk.bold(chart.title);
  if (chart.times.length === 0 || chart.series.length === 0) return `${heading}\n${chalk.dim('  not enough samples yet')}`;
  const labelWidth = 12;
  const width = Math.max(10, columns - labelWidth - 2);
  const series = chart.series.map((s) => downsample(s.values, width));
  const color = chalk.level > 0;
  const plot = asciichart.plot(series, {
    height: 8,
    colors: color ? COLORS : undefined,
    min: Math.min(0, ...series.flat().filter(Number.isFinite)),
    format: (x) => chart.format(x).padStart(labelWidth),
  });
  const legend = chart.series.map((s, i) => `${(color ? CHALKS[i]! : (t: string) => t)('━━')} ${s.label} ${chart.format(s.values.at(-1) ?? NaN)}`).join('   ');
  const span = `${' '.repeat(labelWidth + 2)}${hhmm(chart.times[0]!)} … ${hhmm(chart.times.at(-1)!)} (${chart.times.length} samples)`;
  return `${heading}   ${legend}\n${plot}\n${chalk.dim(span)}`;
}
