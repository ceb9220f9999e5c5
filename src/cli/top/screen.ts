import chalk from 'chalk';
import stringWidth from 'string-width';
import type { QueueDetail, QueueEntry } from '../../operators/answers.js';
import type { Snapshot } from '../../tools/stats.js';
import { clip, clipMiddle, localTime, printable, table } from '../view/format.js';
import { bar, diskSummary, memorySummary } from '../view/panel.js';
import { agePaint, humanAge, humanRate, leaseLeftText, paintAge, pausedMark, pausedMarkWidth, pushHealth, serverNowOf } from '../view/queues.js';
import { HISTORY, keyOf, sparkline, type TopState } from './model.js';

type Align = 'left' | 'right';

/**
 * A cell padded on its plain text, then painted, so that colour codes never upset the columns.
 * The text is made printable first: a worker names itself, and its name is shown to the operator.
 * Widths are terminal cells, not characters: a CJK character or an emoji takes two. Text too long
 * is cut at its end, or with `cut: 'middle'` in its middle, keeping its start and its end: queues
 * are often named alike but for their end (`resize-images-eu`, `resize-images-us`), and hosts
 * differ as often by their start as by their end.
 */
function cell(raw: string, width: number, align: Align, paint?: (s: string) => string, cut: 'end' | 'middle' = 'end'): string {
  const text = printable(raw);
  const clipped = stringWidth(text) <= width ? text : cut === 'middle' ? clipMiddle(text, Math.max(0, width - 1)) : `${clip(text, Math.max(0, width - 1))}…`;
  const gap = ' '.repeat(Math.max(0, width - stringWidth(clipped)));
  const padded = align === 'left' ? clipped + gap : gap + clipped;
  return paint ? paint(padded) : padded;
}

/**
 * A queue's name in a column of `width` cells, cut in its middle if need be, and a paused queue's
 * mark right after it, whole (decisions §8.4): the name gives way to the mark.
 */
function nameCell(q: QueueEntry, width: number): string {
  const mark = pausedMarkWidth(q);
  if (mark === 0) return cell(q.name, width, 'left', chalk.bold, 'middle');
  const name = cell(q.name, Math.max(1, Math.min(width - mark, stringWidth(printable(q.name)))), 'left', chalk.bold, 'middle');
  return name + pausedMark(q) + ' '.repeat(Math.max(0, width - stringWidth(name) - mark));
}

/** The least width of a figure column; a wider figure widens its column (a figure is never cut). */
const NUMBER = 9;
/** The figure columns' headings: pending, in flight, finished/s, failed/s, oldest. */
const FIGURE_HEADS = ['PENDING', 'IN FLIGHT', 'FINISH/S', 'FAIL/S', 'OLDEST'];
const SPARK = 30;
/** Fewer cells than this make no sparkline worth showing. */
const SPARK_LEAST = 4;
/** The sparkline's heading, the first that fits its width. */
const SPARK_HEADINGS = ['DONE/S, LAST MINUTE', 'DONE/S', 'DONE'];
/** Where names are cut, unless the terminal is wide enough for more (or too narrow for this much). */
const NAME_CUT = 30;
/** What a narrow terminal still gives the host and the queue's name before it cuts the figures. */
const HOST_LEAST = 12;
const NAME_LEAST = 12;

/** The figures `svcq top` shows of a queue, with the oldest pending age after them ({@link FIGURE_HEADS}). */
function figureCells(q: QueueEntry): Array<{ text: string; paint?: (s: string) => string }> {
  return [...queueCells(q), { text: humanAge(q.oldestPendingAgeMs), paint: agePaint(q.oldestPendingAgeMs) }];
}

/** Just the columns `svcq top` shows, for the live screen and for the snapshot off a terminal. */
function queueCells(q: QueueEntry): Array<{ text: string; paint?: (s: string) => string }> {
  const inFlight = q.counts.claimed + q.counts.processing;
  const dimZero = (n: number, paint?: (s: string) => string) => (n === 0 ? chalk.dim : paint);
  // decisions §8.5: against the queue's maxActive where it has one (yellow once it is reached).
  const max = q.limits?.maxActive ?? null;
  const inFlightCell = max === null ? { text: String(inFlight), paint: dimZero(inFlight, chalk.cyan) } : { text: `${inFlight}/${max}`, paint: inFlight >= max ? chalk.yellow : chalk.cyan };
  return [
    { text: String(q.counts.pending), paint: dimZero(q.counts.pending) },
    inFlightCell,
    { text: humanRate(q.rates.finished), paint: dimZero(q.rates.finished, chalk.green) },
    { text: humanRate(q.rates.failed), paint: dimZero(q.rates.failed, chalk.red) },
  ];
}

/** One snapshot as a table, for `svcq top` into a pipe or a file. */
export function snapshotTable(queues: QueueEntry[], health: Snapshot | null): string {
  // decisions §8.5, §8.6: held claims and dead letters get columns only where some queue has limits or a dead-letter queue.
  const flow = queues.some((q) => heldTotal(q) > 0 || hasLimit(q) || q.limits?.deadLetter != null);
  // decisions §9.1: a column of push targets' health where some queue is a push queue.
  const pushes = queues.some((q) => q.push);
  const rows = queues.map((q) => [
    q.host,
    q.name + pausedMark(q),
    ...queueCells(q).map((c) => (c.paint ? c.paint(c.text) : c.text)),
    paintAge(q.oldestPendingAgeMs),
    ...(flow ? [String(heldTotal(q)), q.deadLetters == null ? '-' : String(q.deadLetters)] : []),
    ...(pushes ? [pushHealth(q) ?? '-'] : []),
  ]);
  const head = ['host', 'queue', 'pending', 'in flight', 'finished/s', 'failed/s', 'oldest pending', ...(flow ? ['held', 'dead letters'] : []), ...(pushes ? ['push target'] : [])];
  const body = queues.length === 0 ? 'no queues defined' : table(head, rows, ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right', 'right']);
  return `${healthLine(health, null)}\n${body}`;
}

/** Claim requests this node answered that the pause or a limit held back (decisions §8.5); 0 from a server before them. */
function heldTotal(q: QueueEntry): number {
  const h = q.held;
  return h ? h.paused + h.maxActive + h.groupMaxActive + h.rateLimit : 0;
}

/** Whether the queue has a limit of decisions §8.5. */
function hasLimit(q: QueueEntry): boolean {
  const l = q.limits;
  return l !== undefined && (l.maxActive !== null || l.groupMaxActive !== null || l.rateLimit !== null || l.fairness === 'groups');
}

/**
 * Memory and disk (and CPU busy once two snapshots are known) on one line, of at most `columns`
 * cells. Where the whole line does not fit, the bars narrow and then go (the percents say as much),
 * then the server's name is cut in its middle (to 12 cells), then the figures at the line's end go
 * whole: a figure is never cut.
 */
export function healthLine(health: Snapshot | null, cpuBusy: number | null, columns = Infinity): string {
  if (!health) return chalk.dim('server health unknown');
  const pct = (f: number): string => `${(100 * f).toFixed(0).padStart(3)} %`;
  const parts: Array<{ label: string; fraction?: number; figure: string }> = [];
  if (cpuBusy !== null) parts.push({ label: 'cpu', fraction: cpuBusy, figure: pct(cpuBusy) });
  else if (health.load.length > 0) parts.push({ label: 'load', figure: health.load.map((l) => l.toFixed(2)).join(' ') });
  if (health.memory) {
    const m = memorySummary(health.memory);
    parts.push({ label: 'mem', fraction: m.fraction, figure: pct(m.fraction) });
  }
  if (health.disk) {
    const d = diskSummary(health.disk);
    parts.push({ label: 'disk', fraction: d.fraction, figure: pct(d.fraction) });
  }
  const name = printable(health.hostname);
  const draw = (shown: typeof parts, barWidth: number, nameWidth: number): string => {
    const drawn = shown.map((p) => (p.fraction === undefined || barWidth === 0 ? `${p.label} ${p.figure}` : `${p.label} ${bar(p.fraction, barWidth)} ${p.figure}`));
    return [chalk.bold(cell(name, nameWidth, 'left', undefined, 'middle').trimEnd()), ...drawn].join('  ');
  };
  const whole = stringWidth(name);
  const least = Math.min(whole, HOST_LEAST);
  for (let count = parts.length; count >= 0; count--) {
    for (const barWidth of count === parts.length ? [10, 5, 0] : [0]) {
      for (let nameWidth = whole; nameWidth >= least; nameWidth--) {
        const line = draw(parts.slice(0, count), barWidth, nameWidth);
        if (stringWidth(line) <= columns) return line;
        // Only with the narrowest bars is the name cut.
        if (barWidth !== 0) break;
      }
    }
  }
  return draw([], 0, least);
}

export interface ScreenSize {
  columns: number;
  rows: number;
}

/** What the screen says about the view itself: the server's URL and the time between refreshes. */
export interface ViewOptions {
  url: string;
  intervalMs: number;
  /** Whether keys are read (stdin is a terminal); without them the footer says how to quit instead. */
  keys?: boolean;
}

/**
 * The whole screen as lines (Ink truncates each to the width): the header with the server's
 * health, the queues with the selected one highlighted, the selected queue's leases and oldest
 * pending items, and a footer. It never has more lines than the terminal has rows, less one, so
 * that a redraw never scrolls. A terminal too short for the detail shows the title, the queues and
 * one line of keys (or the error) only.
 */
export function screenLines(state: TopState, size: ScreenSize, view: ViewOptions, now = Date.now()): string[] {
  const lines: string[] = [];
  const f = state.fetched;
  const budget = Math.max(1, size.rows - 1);
  // The detail below needs at least a title and two short lists; the queues get the rest.
  const footerLines = 2;
  const detailMin = 9;
  const compact = budget < 4 + 1 + detailMin + footerLines;
  // The URL gives way, in its middle, to the time on a narrow terminal.
  const clock = f ? localTime(f.at).slice(11, 19) : 'connecting…';
  const urlWidth = Math.max(1, Math.min(stringWidth(view.url), size.columns - stringWidth(`svcq top    ${clock}`)));
  lines.push(`${chalk.bold.cyan('svcq top')}  ${cell(view.url, urlWidth, 'left', undefined, 'middle')}  ${chalk.dim(clock)}`);
  if (!compact) {
    lines.push(healthLine(f?.health ?? null, state.cpuBusy, size.columns));
    lines.push('');
  }

  const queues = f?.list.queues ?? [];
  // Measured over every queue, not only those on the screen: the columns stay put as the selection moves.
  const figureWidths = FIGURE_HEADS.map((_, i) => Math.max(NUMBER, ...queues.map((q) => stringWidth(figureCells(q)[i]!.text))));
  const { hostWidth, nameWidth, sparkWidth } = rowWidths(queues, size.columns, figureWidths);
  const sparkHeading = SPARK_HEADINGS.find((h) => h.length <= sparkWidth);
  const header =
    ' ' +
    [
      cell('HOST', hostWidth, 'left'),
      cell('QUEUE', nameWidth, 'left'),
      ...FIGURE_HEADS.map((head, i) => cell(head, figureWidths[i]!, 'right')),
      ...(sparkWidth > 0 ? [cell(sparkHeading ?? '', sparkWidth, 'left')] : []),
    ].join(' ');
  lines.push(chalk.bold(header));

  const queueRows = Math.max(1, Math.min(queues.length, budget - lines.length - (compact ? 1 : detailMin + footerLines)));
  const at = Math.max(0, queues.findIndex((q) => keyOf(q) === state.selected));
  // One sample per refresh: the sparkline's heading says it spans the last minute.
  const perMinute = Math.max(1, Math.min(HISTORY, Math.round(60_000 / view.intervalMs)));
  const first = Math.min(Math.max(0, at - Math.floor(queueRows / 2)), Math.max(0, queues.length - queueRows));
  if (queues.length === 0) lines.push(chalk.dim(f ? ' no queues defined' : ' waiting for the server…'));
  for (const q of queues.slice(first, first + queueRows)) {
    const selected = keyOf(q) === state.selected;
    const series = state.throughput.get(keyOf(q)) ?? [];
    const row = [
      cell(q.host, hostWidth, 'left', undefined, 'middle'),
      nameCell(q, nameWidth),
      ...figureCells(q).map((c, i) => cell(c.text, figureWidths[i]!, 'right', c.paint)),
      ...(sparkWidth > 0 ? [chalk.green(sparkline(series, sparkWidth, perMinute))] : []),
    ].join(' ');
    lines.push(selected ? chalk.inverse(`>${row}`) : ` ${row}`);
  }
  const every = view.intervalMs === 1000 ? 'second' : `${view.intervalMs / 1000} s`;
  const keys = chalk.dim(
    view.keys === false ? `Ctrl-C quits (stdin is not a terminal: no keys are read)   refreshed every ${every}` : `↑/↓ PgUp/PgDn Home/End select   q quit   refreshed every ${every}`,
  );
  // The figures shown stay those of the last refresh that answered: say from when, and that it goes on trying.
  const stale = f ? `; showing ${localTime(f.at).slice(11, 19)}` : '';
  const error = state.error ? chalk.red(`! ${state.error}${stale}; trying again every ${every}`) : null;
  if (compact) {
    // One line of keys, or the error, which matters more, ends the screen; on a terminal of a few
    // rows the title and then the header give way to the selected queue.
    lines.push(error ?? keys);
    return lines.slice(-budget);
  }
  if (queues.length > queueRows) lines.push(chalk.dim(` rows ${first + 1}-${first + queueRows} of ${queues.length}`));
  lines.push('');

  const room = budget - lines.length - footerLines;
  // Ages and lease ends are the server's times: measured against the server's clock, whose offset
  // comes from its health snapshot, or else from the detail's own oldest age as it was fetched.
  // The offset is kept, not the server's time: a screen redrawn between refreshes moves on.
  const offset = f?.clockOffsetMs ?? (f?.detail ? serverNowOf(f.detail, f.at) - f.at : 0);
  const serverNow = now + offset;
  lines.push(...detailLines(f?.detail ?? null, state.selected, room, size.columns, serverNow));

  while (lines.length < budget - footerLines) lines.push('');
  lines.push(error ?? '');
  lines.push(keys);
  return lines.slice(0, budget);
}

/**
 * The widths of a queue row's host, queue and sparkline columns, in terminal cells, so that the row
 * fits the terminal. The figures come first: they are what the view is for, and a row cut at the
 * terminal's edge loses them (and the sparkline's latest samples, which are on its right). The
 * names come next, each cut at 30 cells (on a terminal too narrow even for that, the host shrinks
 * to 12 cells first, then the queue's name); the sparkline takes what is left, up to 30 cells, its
 * minute spread over fewer characters, and is left out with less than 4. On a terminal wide enough
 * for all that, the names grow, up to whole, the queue's name first.
 */
function rowWidths(queues: QueueEntry[], columns: number, figureWidths: number[]): { hostWidth: number; nameWidth: number; sparkWidth: number } {
  const hostWhole = Math.max(4, ...queues.map((q) => stringWidth(printable(q.host))));
  const nameWhole = Math.max(5, ...queues.map((q) => stringWidth(printable(q.name)) + pausedMarkWidth(q)));
  let hostWidth = Math.min(NAME_CUT, hostWhole);
  let nameWidth = Math.min(NAME_CUT, nameWhole);
  // What the names (and the sparkline) may have: the row less the selection mark, the names'
  // separators and the figures with theirs.
  let room = columns - (1 + 2 + figureWidths.reduce((sum, w) => sum + w, 0) + (figureWidths.length - 1));
  const over = hostWidth + nameWidth - room;
  if (over > 0) {
    const hostGives = Math.min(over, Math.max(0, hostWidth - HOST_LEAST));
    hostWidth -= hostGives;
    nameWidth -= Math.min(over - hostGives, Math.max(0, nameWidth - NAME_LEAST));
  }
  room -= hostWidth + nameWidth;
  // The sparkline's separator, then the sparkline.
  const sparkWidth = room - 1 >= SPARK_LEAST ? Math.min(SPARK, room - 1) : 0;
  let spare = room - (sparkWidth > 0 ? 1 + sparkWidth : 0);
  if (sparkWidth < SPARK || spare <= 0) return { hostWidth, nameWidth, sparkWidth };
  const nameGrows = Math.min(nameWhole - nameWidth, Math.max(Math.ceil(spare / 2), spare - (hostWhole - hostWidth)));
  nameWidth += nameGrows;
  spare -= nameGrows;
  hostWidth += Math.min(hostWhole - hostWidth, spare);
  return { hostWidth, nameWidth, sparkWidth };
}

/**
 * The selected queue's leases (soonest end first) and oldest pending items, within `room` lines.
 * Its title names the queue whole, or cut in its middle where `columns` are too few for that.
 */
/** The selected queue's flow control in a few words: active of maxActive, the rate limit, claims held back, dead letters; '' for a queue with none of them. */
function flowLine(q: QueueEntry): string {
  const parts: string[] = [];
  const l = q.limits;
  if (l?.maxActive != null) parts.push(`active ${q.active ?? 0}/${l.maxActive}`);
  if (l?.groupMaxActive != null) parts.push(`per group ${l.groupMaxActive}`);
  if (l?.rateLimit) parts.push(`rate ${l.rateLimit.max}/${l.rateLimit.perSeconds}s`);
  if (l?.fairness === 'groups') parts.push(`groups waiting ${q.groupsWaiting ?? '-'}`);
  if (hasLimit(q) || heldTotal(q) > 0) parts.push(`held ${heldTotal(q)}`);
  if (l?.deadLetter != null) parts.push(`dead letters ${q.deadLetters ?? '-'} in ${l.deadLetter}`);
  // decisions §9.1: a push queue's target health, and its deliveries in flight on the node that answered.
  if (q.push) parts.push(`push ${pushHealth(q)} ${q.push.inFlight}/${q.push.concurrency} in flight`);
  return parts.length === 0 ? '' : ` ${parts.join('  ')}`;
}

function detailLines(detail: QueueDetail | null, selected: string | null, room: number, columns: number, now: number): string[] {
  if (!selected) return [];
  const lines: string[] = [];
  const mark = detail && keyOf(detail) === selected ? pausedMarkWidth(detail) : 0;
  const title = cell(selected, Math.max(1, Math.min(stringWidth(selected), columns - 1 - mark)), 'left', undefined, 'middle');
  if (!detail || keyOf(detail) !== selected) return [chalk.bold(title), chalk.dim(' loading…')];
  const c = detail.counts;
  // The counts follow the title, on the lines below it where they do not fit beside it: a figure
  // is never cut at the terminal's edge.
  const figures: Array<[string, string]> = [
    ['finished', String(c.finished)],
    ['failed', String(c.failed)],
    ['timedout', String(c.timedout)],
    ['cancelled', String(c.cancelled)],
    ['posted/s', humanRate(detail.rates.posted)],
    ['claimed/s', humanRate(detail.rates.claimed)],
  ];
  let line = chalk.bold.cyan(title) + pausedMark(detail);
  let width = stringWidth(title) + mark;
  for (const [label, figure] of figures) {
    const pair = `${label} ${figure}`;
    if (width + 2 + pair.length > columns) {
      lines.push(line);
      line = ` ${chalk.dim(label)} ${figure}`;
      width = 1 + pair.length;
    } else {
      line += `  ${chalk.dim(label)} ${figure}`;
      width += 2 + pair.length;
    }
  }
  lines.push(line);
  // decisions §8.5, §8.6: limits, claims held back and dead letters, on one line cut at the terminal's edge.
  const flow = flowLine(detail);
  if (flow !== '') lines.push(cell(flow, Math.max(1, columns - 1), 'left'));
  // decisions §8.3: the schedules' next and last occurrences, on one line cut at the terminal's edge.
  const schedules = detail.schedules ?? [];
  if (schedules.length > 0) {
    const clock = (t: number | null): string => (t === null ? '-' : localTime(t).slice(11, 19));
    const text = ` schedules  ${schedules.map((sc) => `${sc.name} next ${clock(sc.next)} last ${clock(sc.last)}`).join(', ')}`;
    lines.push(cell(text, Math.max(1, columns - 1), 'left'));
  }
  // Two lists, each a title and its header (or "none"); what rows are left are shared, leases
  // first, and what one list does not need the other has.
  const rows = Math.max(0, room - lines.length - 4);
  const leaseRows = Math.min(detail.leases.length, Math.max(Math.ceil(rows / 2), rows - detail.oldest.length));
  const oldestRows = Math.min(detail.oldest.length, rows - leaseRows);

  lines.push(chalk.bold(` leases (${detail.leases.length}${detail.leases.length === 100 ? '+' : ''})`) + chalk.dim('  soonest end first'));
  if (detail.leases.length === 0) lines.push(chalk.dim('   none'));
  else {
    const shown = detail.leases.slice(0, leaseRows);
    // A lease long past its end says so at length ("ended 23h 59m ago"): its column widens for it, not cutting it.
    const endsWidth = Math.max(12, ...shown.map((l) => stringWidth(leaseLeftText(l.until - now))));
    lines.push(chalk.dim(`   ${cell('ID', 16, 'left')}  ${cell('WORKER', 24, 'left')}  ${cell('ENDS IN', endsWidth, 'right')}  ${cell('ATTEMPTS', 8, 'right')}`));
    for (const l of shown) {
      lines.push(`   ${cell(l.id, 16, 'left')}  ${cell(l.worker, 24, 'left')}  ${cell(leaseLeftText(l.until - now), endsWidth, 'right', l.until < now ? chalk.red : undefined)}  ${cell(String(l.attempts), 8, 'right')}`);
    }
  }
  lines.push(chalk.bold(` oldest pending (${detail.oldest.length}${detail.oldest.length === 20 ? '+' : ''})`));
  if (detail.oldest.length === 0) lines.push(chalk.dim('   none'));
  else {
    lines.push(chalk.dim(`   ${cell('ID', 16, 'left')}  ${cell('POSTED', 23, 'left')}  ${cell('AGE', 12, 'right')}  ${cell('ATTEMPTS', 8, 'right')}`));
    for (const o of detail.oldest.slice(0, oldestRows)) {
      lines.push(`   ${cell(o.id, 16, 'left')}  ${cell(localTime(o.postedAt), 23, 'left')}  ${cell(humanAge(now - o.postedAt), 12, 'right')}  ${cell(String(o.attempts), 8, 'right')}`);
    }
  }
  return lines.slice(0, Math.max(0, room));
}
