import chalk from 'chalk';
import type { DiskStats, MemoryStats, Snapshot } from '../../tools/stats.js';
import { humanBytes, humanDuration } from './format.js';

const BAR_WIDTH = 30;

/** `[██████░░░░]` coloured by how full it is. */
export function bar(fraction: number, width = BAR_WIDTH): string {
  const f = Number.isFinite(fraction) ? Math.min(1, Math.max(0, fraction)) : 0;
  const filled = Math.round(f * width);
  const paint = f >= 0.9 ? chalk.red : f >= 0.7 ? chalk.yellow : chalk.green;
  return `${paint('█'.repeat(filled))}${chalk.dim('░'.repeat(width - filled))}`;
}

function pct(fraction: number): string {
  return `${(100 * fraction).toFixed(1).padStart(5)} %`;
}

/**
 * Memory as a share of the total. `used` is what is not available (interface §4.6), so used and
 * available add up to the total.
 */
export function memorySummary(m: MemoryStats): { fraction: number; text: string } {
  const fraction = m.total > 0 ? m.used / m.total : 0;
  return { fraction, text: `${humanBytes(m.used)} used, ${humanBytes(m.available)} available, of ${humanBytes(m.total)}` };
}

/**
 * Disk as df shows it: the percent is used / (used + free), because the blocks reserved for root
 * are neither used nor free to an ordinary writer. The reserve is named so the figures add up.
 */
export function diskSummary(d: DiskStats): { fraction: number; text: string } {
  const usable = d.used + d.free;
  const fraction = usable > 0 ? d.used / usable : 0;
  const reserved = d.total - usable;
  const rest = reserved > 0 ? `${humanBytes(usable)} usable of ${humanBytes(d.total)}, ${humanBytes(reserved)} reserved for root` : `of ${humanBytes(d.total)}`;
  return { fraction, text: `${humanBytes(d.used)} used, ${humanBytes(d.free)} free (${rest})` };
}

/** The `svcq stats now` panel: host, uptime and load; per-core CPU busy since boot; memory and disk as bars; I/O counters. */
export function renderSnapshot(s: Snapshot): string {
  const lines: string[] = [];
  const label = (text: string): string => chalk.bold(text.padEnd(9));
  lines.push(`${chalk.bold.cyan(s.hostname)}  up ${humanDuration(s.uptime)}  load ${s.load.map((l) => l.toFixed(2)).join(' ')}  ${chalk.dim(new Date(s.ts * 1000).toISOString())}`);
  lines.push('');
  if (s.cpu) {
    lines.push(`${label('cpu')}${s.cpu.model} ${chalk.dim(`(${s.cpu.cores.length} cores, busy since boot)`)}`);
    s.cpu.cores.forEach((c, i) => {
      const total = c.user + c.nice + c.sys + c.idle + c.irq;
      const busy = total > 0 ? (total - c.idle) / total : 0;
      lines.push(`${chalk.dim(`  core ${String(i).padEnd(3)}`)}${bar(busy)} ${pct(busy)}`);
    });
  } else lines.push(`${label('cpu')}${chalk.dim('not reported')}`);
  if (s.memory) {
    const memory = memorySummary(s.memory);
    lines.push(`${label('memory')}${bar(memory.fraction)} ${pct(memory.fraction)}  ${memory.text}`);
  } else lines.push(`${label('memory')}${chalk.dim('not reported')}`);
  if (s.disk) {
    const disk = diskSummary(s.disk);
    lines.push(`${label(`disk ${s.disk.path}`)}${bar(disk.fraction)} ${pct(disk.fraction)}  ${disk.text}`);
  } else lines.push(`${label('disk')}${chalk.dim('not reported')}`);
  lines.push('');
  lines.push(`${label('disk io')}${s.diskIo ? `${humanBytes(s.diskIo.readBytes)} read, ${humanBytes(s.diskIo.writeBytes)} written since boot` : chalk.dim('not reported')}`);
  lines.push(`${label('net io')}${s.netIo ? `${humanBytes(s.netIo.rxBytes)} received, ${humanBytes(s.netIo.txBytes)} sent since boot` : chalk.dim('not reported')}`);
  return lines.join('\n');
}
