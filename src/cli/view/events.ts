import chalk, { type ChalkInstance } from 'chalk';
import type { TaskEvent } from '../../engine/item.js';
import { localTime, parseJsonLines, printable } from './format.js';

const PAINT: Record<string, ChalkInstance> = {
  posted: chalk.cyan,
  claimed: chalk.blue,
  progress: chalk.white,
  finished: chalk.green,
  error: chalk.yellow,
  requeued: chalk.yellow,
  released: chalk.yellow,
  failed: chalk.red,
  timedout: chalk.red,
  cancelled: chalk.magenta,
  purged: chalk.dim,
};

/** One task event as a readable line: time, event, queue, id, then whatever else it carries. */
export function eventLine(event: TaskEvent): string {
  const paint = PAINT[event.event] ?? chalk.white;
  const extra = [
    event.attempts !== undefined ? `attempt ${event.attempts}` : '',
    event.worker !== undefined ? `worker ${printable(event.worker)}` : '',
    event.status !== undefined ? `status ${event.status}` : '',
  ].filter(Boolean);
  return [chalk.dim(localTime(event.ts)), paint(event.event.padEnd(9)), `${event.host}/${event.queue}`, chalk.bold(event.id), ...extra].join('  ');
}

/** The readable lines of a chunk of task-event JSON lines; an unreadable line is shown as it is. */
export function eventLines(chunk: string): string[] {
  return parseJsonLines(chunk).map((value) => (typeof value === 'object' && value !== null ? eventLine(value as TaskEvent) : String(value)));
}
