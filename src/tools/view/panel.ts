import chalk from 'chalk';
import type { Snapshot } from '../stats.js';
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
    const used = s.memory.total > 0 ? s.memory.used / s.memory.total : 0;
    lines.push(`${label('memory')}${bar(used)} ${pct(used)}  ${humanBytes(s.memory.used)} of ${humanBytes(s.memory.total)} used, ${humanBytes(s.memory.available)} available`);
  } else lines.push(`${label('memory')}${chalk.dim('not reported')}`);
  if (s.disk) {
    const used = s.disk.total > 0 ? s.disk.used / s.disk.total : 0;
    lines.push(`${label(`disk ${s.disk.path}`)}${bar(used)} ${pct(used)}  ${humanBytes(s.disk.used)} of ${humanBytes(s.disk.total)} used, ${humanBytes(s.disk.free)} free`);
  } else lines.push(`${label('disk')}${chalk.dim('not reported')}`);
  lines.push('');
  lines.push(`${label('disk io')}${s.diskIo ? `${humanBytes(s.diskIo.readBytes)} read, ${humanBytes(s.diskIo.writeBytes)} written since boot` : chalk.dim('not reported')}`);
  lines.push(`${label('net io')}${s.netIo ? `${humanBytes(s.netIo.rxBytes)} received, ${humanBytes(s.netIo.txBytes)} sent since boot` : chalk.dim('not reported')}`);
  return lines.join('\n');
}
