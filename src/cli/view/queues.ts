import chalk from 'chalk';
import type { QueueDetail, QueueEntry, QueueList } from '../../operators/answers.js';
import { localTime, printable, table } from './format.js';

/** `1234` ms → `1.2s`, `75000` → `1m 15s`, `5400000` → `1h 30m`, `null` → `-` (nothing pending). */
export function humanAge(ms: number | null): string {
  if (ms === null) return '-';
  // An age below zero is clocks that differ by less than can be told (top corrects larger gaps): just posted.
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.floor(s)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** A rate per second with as many decimals as small values need: `0`, `0.02`, `1.5`, `120`. */
export function humanRate(perSecond: number): string {
  if (perSecond === 0) return '0';
  if (perSecond < 0.1) return perSecond.toFixed(2);
  if (perSecond < 10) return perSecond.toFixed(1);
  return String(Math.round(perSecond));
}

/** How an age is painted: dim when there is none, yellow past a minute and red past ten. */
export function agePaint(ms: number | null): (s: string) => string {
  if (ms === null) return chalk.dim;
  return ms >= 600_000 ? chalk.red : ms >= 60_000 ? chalk.yellow : (s) => s;
}

/** The oldest pending age, painted by {@link agePaint}. */
export function paintAge(ms: number | null): string {
  return agePaint(ms)(humanAge(ms));
}

function count(n: number, paint?: (s: string) => string): string {
  const text = String(n);
  if (n === 0) return chalk.dim(text);
  return paint ? paint(text) : text;
}

function rate(perSecond: number, paint?: (s: string) => string): string {
  const text = humanRate(perSecond);
  if (perSecond === 0) return chalk.dim(text);
  return paint ? paint(text) : text;
}

const LIST_HEAD = ['host', 'queue', 'pending', 'claimed', 'processing', 'finished', 'failed', 'oldest pending', 'posted/s', 'claimed/s', 'finished/s', 'failed/s'];
const LIST_ALIGN: Array<'left' | 'right'> = ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'];

function listRow(q: QueueEntry): string[] {
  return [
    q.host,
    chalk.bold(q.name),
    count(q.counts.pending),
    count(q.counts.claimed),
    count(q.counts.processing),
    count(q.counts.finished, chalk.green),
    count(q.counts.failed, chalk.red),
    paintAge(q.oldestPendingAgeMs),
    rate(q.rates.posted),
    rate(q.rates.claimed),
    rate(q.rates.finished, chalk.green),
    rate(q.rates.failed, chalk.red),
  ];
}

/** `svcq queues`: one row per defined queue; rates are per second over the last minute. */
export function queueListTable(list: QueueList): string {
  if (list.queues.length === 0) return 'no queues defined';
  return `${table(LIST_HEAD, list.queues.map(listRow), LIST_ALIGN)}\nrates per second over the last 60 s`;
}

/** `svcq queue HOST/NAME`: counts, age and rates, then the oldest pending items and the leases. */
/** Clocks closer than this are taken to agree (top's health snapshot tells the time to a second). */
export const CLOCK_SLACK_MS = 2000;

/**
 * The server's now, as its answer tells it: the oldest pending item's age was measured against
 * its clock. This machine's now where the answer cannot tell (nothing pending) or the clocks
 * agree to within {@link CLOCK_SLACK_MS}: ages and lease ends are the server's times.
 */
export function serverNowOf(q: QueueDetail, localNow = Date.now()): number {
  if (q.oldestPendingAgeMs === null || q.oldest.length === 0) return localNow;
  const now = Math.min(...q.oldest.map((o) => o.postedAt)) + q.oldestPendingAgeMs;
  return Math.abs(now - localNow) > CLOCK_SLACK_MS ? now : localNow;
}

export function queueDetailView(q: QueueDetail, now = serverNowOf(q)): string {
  const lines: string[] = [];
  lines.push(`${chalk.bold.cyan(`${q.host}/${q.name}`)}  oldest pending ${paintAge(q.oldestPendingAgeMs)}`);
  lines.push('');
  const c = q.counts;
  lines.push(
    table(
      ['pending', 'claimed', 'processing', 'finished', 'failed', 'timedout', 'cancelled'],
      [[count(c.pending), count(c.claimed), count(c.processing), count(c.finished, chalk.green), count(c.failed, chalk.red), count(c.timedout, chalk.red), count(c.cancelled)]],
      ['right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
  );
  lines.push(`per second over the last 60 s: posted ${humanRate(q.rates.posted)}, claimed ${humanRate(q.rates.claimed)}, finished ${humanRate(q.rates.finished)}, failed ${humanRate(q.rates.failed)}`);
  lines.push('');
  lines.push(chalk.bold(`oldest pending (${q.oldest.length}${q.oldest.length === 20 ? ' shown' : ''})`));
  if (q.oldest.length === 0) lines.push(chalk.dim('  none'));
  else
    lines.push(
      table(
        ['id', 'posted at', 'age', 'attempts'],
        q.oldest.map((o) => [o.id, localTime(o.postedAt), paintAge(now - o.postedAt), String(o.attempts)]),
        ['left', 'left', 'right', 'right'],
      ),
    );
  lines.push('');
  lines.push(chalk.bold(`leases (${q.leases.length}${q.leases.length === 100 ? ' shown' : ''}, soonest end first)`));
  if (q.leases.length === 0) lines.push(chalk.dim('  none'));
  else
    lines.push(
      table(
        ['id', 'worker', 'ends in', 'attempts'],
        q.leases.map((l) => [l.id, printable(l.worker), leaseLeft(l.until - now), String(l.attempts)]),
        ['left', 'left', 'right', 'right'],
      ),
    );
  return lines.join('\n');
}

/** Time left on a lease; a lease already past its end (not yet applied) says so. */
export function leaseLeftText(ms: number): string {
  return ms < 0 ? `ended ${humanAge(-ms)} ago` : humanAge(ms);
}

/** {@link leaseLeftText}, in red for a lease past its end. */
export function leaseLeft(ms: number): string {
  return ms < 0 ? chalk.red(leaseLeftText(ms)) : leaseLeftText(ms);
}
