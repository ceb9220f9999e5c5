import * as asciichart from 'asciichart';
import chalk from 'chalk';
import type { CoreTimes } from '../../tools/stats.js';
import { decimalsFor, humanBytes, parseJsonLines } from './format.js';

/** One stats day-file line: `ts` in ms and the fields of its type. */
export type StatLine = { ts: number } & Record<string, unknown>;

/** A metric drawn over the day: one or two series that share a chart and a unit. */
export interface Chart {
  title: string;
  /** Sample times in ms, one per point. */
  times: number[];
  series: Array<{ label: string; values: number[] }>;
  /** Formats a value; `step` is the axis step, for as many decimals as tell two rows apart. */
  format: (value: number, step?: number) => string;
  /**
   * `zero`: the y axis starts at 0 (rates, CPU busy). `data`: it spans the data's own range, so
   * that 875 MiB of used memory moving by a few MiB is a line, not a flat row at the bottom of a
   * 0..23 GiB scale.
   */
  scale: 'zero' | 'data';
  /** What the latest value is a part of (memory or usable disk), shown as a percent in the legend. */
  total?: number;
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

const percent = (v: number, step?: number): string => `${v.toFixed(step === undefined ? 0 : Math.max(0, decimalsFor(step)))} %`;
const bytes = (v: number, step?: number): string => humanBytes(Math.round(v), step);
const bytesPerSecond = (v: number, step?: number): string => `${humanBytes(Math.round(v), step)}/s`;

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
      return { title: 'CPU busy, all cores', times, series: [{ label: 'busy', values }], format: percent, scale: 'zero' };
    }
    // Memory and disk draw what is used alone: the rest (available, free) is its mirror image, and on
    // one scale with it a small used figure would be a flat line at 0.
    case 'memory': {
      const total = num(lines.at(-1)?.total);
      return { title: `Memory used${Number.isFinite(total) ? ` (of ${humanBytes(total)})` : ''}`, times: lines.map((l) => l.ts), series: [{ label: 'used', values: lines.map((l) => num(l.used)) }], format: bytes, scale: 'data', total };
    }
    case 'disk': {
      const last = lines.at(-1);
      const usable = num(last?.used) + num(last?.free);
      const path = typeof last?.path === 'string' ? last.path : '/';
      return { title: `Disk ${path} used${Number.isFinite(usable) ? ` (of ${humanBytes(usable)} usable)` : ''}`, times: lines.map((l) => l.ts), series: [{ label: 'used', values: lines.map((l) => num(l.used)) }], format: bytes, scale: 'data', total: usable };
    }
    case 'diskio': {
      const read = rates(lines, 'readBytes');
      const written = rates(lines, 'writeBytes');
      return { title: 'Disk I/O', times: read.times, series: [{ label: 'read', values: read.values }, { label: 'written', values: written.values }], format: bytesPerSecond, scale: 'zero' };
    }
    case 'netio': {
      const rx = rates(lines, 'rxBytes');
      const tx = rates(lines, 'txBytes');
      return { title: 'Network I/O', times: rx.times, series: [{ label: 'received', values: rx.values }, { label: 'sent', values: tx.values }], format: bytesPerSecond, scale: 'zero' };
    }
    default:
      return { title: type, times: [], series: [], format: String, scale: 'zero' };
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

const HEIGHT = 8;

/**
 * The y axis range of a chart. `data` spans the values themselves, widened to at least 2 % of the
 * largest so that noise of a few bytes is not drawn as a cliff; `zero` runs from 0 to the largest.
 */
export function axisRange(values: number[], scale: Chart['scale']): { min: number; max: number } {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return { min: 0, max: 1 };
  let min = Math.min(...finite);
  let max = Math.max(...finite);
  if (scale === 'zero') return { min: Math.min(0, min), max: Math.max(max, min === max ? min + 1 : max) };
  const span = Math.max(max - min, Math.abs(max) * 0.02, 1);
  const pad = (span - (max - min)) / 2;
  min = Math.max(min < 0 ? -Infinity : 0, min - pad);
  max = min + span;
  return { min, max };
}

/** A gap in the samples (NaN) takes the last value before it, so the line stays whole. */
function fillGaps(values: number[]): number[] {
  let last = values.find(Number.isFinite) ?? 0;
  return values.map((v) => (Number.isFinite(v) ? (last = v) : last));
}

/** Draws a chart with asciichart: a title with the latest values, the plot, and the time span under it. */
export function renderChart(chart: Chart, columns = 80): string {
  const heading = chalk.bold(chart.title);
  if (chart.times.length === 0 || chart.series.length === 0) return `${heading}\n${chalk.dim('  not enough samples yet')}`;
  const labelWidth = 12;
  const width = Math.max(10, columns - labelWidth - 2);
  const series = chart.series.map((s) => fillGaps(downsample(s.values, width)));
  const color = chalk.level > 0;
  const { min, max } = axisRange(series.flat(), chart.scale);
  const step = (max - min) / HEIGHT;
  const plot = asciichart.plot(series, {
    height: HEIGHT,
    colors: color ? COLORS : undefined,
    min,
    max,
    format: (x) => chart.format(x, step).padStart(labelWidth),
  });
  const share = (v: number): string => (chart.total !== undefined && chart.total > 0 && Number.isFinite(v) ? ` (${((100 * v) / chart.total).toFixed(1)} %)` : '');
  const legend = chart.series.map((s, i) => `${(color ? CHALKS[i]! : (t: string) => t)('━━')} ${s.label} ${chart.format(s.values.at(-1) ?? NaN)}${share(s.values.at(-1) ?? NaN)}`).join('   ');
  const span = `${' '.repeat(labelWidth + 2)}${hhmm(chart.times[0]!)} … ${hhmm(chart.times.at(-1)!)} (${chart.times.length} samples)`;
  return `${heading}   ${legend}\n${plot}\n${chalk.dim(span)}`;
}
