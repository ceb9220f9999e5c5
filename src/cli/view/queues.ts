import chalk from 'chalk';
import type { QueueDetail, QueueEntry, QueueList } from '../../operators/answers.js';
import stringWidth from 'string-width';
import { clipMiddle, localTime, printable, table } from './format.js';

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

/**
 * What follows a paused queue's name wherever svcq shows queues (decisions §8.4): in `svcq queues`,
 * `svcq queue` and `svcq top`. It is never cut: it widens the name's column in `svcq queues` (a
 * narrow terminal leaves out other columns first), and in `svcq top`, whose columns are fixed, a
 * long name is cut to make room for it.
 */
export const PAUSED_MARK = ' (paused)';

/** The mark, painted, after a paused queue's name; nothing after another's. */
export function pausedMark(q: Pick<QueueEntry, 'paused'>): string {
  return q.paused ? chalk.yellow(PAUSED_MARK) : '';
}

/** The cells the mark takes after the queue's name. */
export function pausedMarkWidth(q: Pick<QueueEntry, 'paused'>): number {
  return q.paused ? PAUSED_MARK.length : 0;
}

/** One column of `svcq queues`: its heading and a queue's cell (painted; its width is that of its text). */
interface ListColumn {
  head: string;
  align: 'left' | 'right';
  cell: (q: QueueEntry) => string;
}

const LIST_COLUMNS = {
  host: { head: 'host', align: 'left', cell: (q) => q.host },
  queue: { head: 'queue', align: 'left', cell: (q) => chalk.bold(q.name) + pausedMark(q) },
  pending: { head: 'pending', align: 'right', cell: (q) => count(q.counts.pending) },
  claimed: { head: 'claimed', align: 'right', cell: (q) => count(q.counts.claimed) },
  processing: { head: 'processing', align: 'right', cell: (q) => count(q.counts.processing) },
  inFlight: { head: 'in flight', align: 'right', cell: (q) => count(q.counts.claimed + q.counts.processing, chalk.cyan) },
  finished: { head: 'finished', align: 'right', cell: (q) => count(q.counts.finished, chalk.green) },
  failed: { head: 'failed', align: 'right', cell: (q) => count(q.counts.failed, chalk.red) },
  oldestPending: { head: 'oldest pending', align: 'right', cell: (q) => paintAge(q.oldestPendingAgeMs) },
  oldest: { head: 'oldest', align: 'right', cell: (q) => paintAge(q.oldestPendingAgeMs) },
  posted: { head: 'posted/s', align: 'right', cell: (q) => rate(q.rates.posted) },
  claimedRate: { head: 'claimed/s', align: 'right', cell: (q) => rate(q.rates.claimed) },
  finishedRate: { head: 'finished/s', align: 'right', cell: (q) => rate(q.rates.finished, chalk.green) },
  failedRate: { head: 'failed/s', align: 'right', cell: (q) => rate(q.rates.failed, chalk.red) },
} satisfies Record<string, ListColumn>;

type ListKey = keyof typeof LIST_COLUMNS;

const FULL_LIST: ListKey[] = ['host', 'queue', 'pending', 'claimed', 'processing', 'finished', 'failed', 'oldestPending', 'posted', 'claimedRate', 'finishedRate', 'failedRate'];

/**
 * The columns of `svcq queues` from the most to the fewest, each set narrower than the one before:
 * the rates of posts and claims go first (a backlog shows in pending and in the oldest age), then
 * claimed and processing become one "in flight" (as `svcq top` shows them), the oldest age gets a
 * shorter heading, and the counts of finished and failed items go (their rates stay); past that
 * the names are cut, and only then do the rates, then in flight, go. Pending and the oldest age stay.
 */
const LIST_STEPS: ListKey[][] = [FULL_LIST];
for (const change of [
  (keys: ListKey[]) => keys.filter((k) => k !== 'claimedRate'),
  (keys: ListKey[]) => keys.filter((k) => k !== 'posted'),
  (keys: ListKey[]) => keys.flatMap((k): ListKey[] => (k === 'claimed' ? ['inFlight'] : k === 'processing' ? [] : [k])),
  (keys: ListKey[]) => keys.map((k) => (k === 'oldestPending' ? 'oldest' : k)),
  (keys: ListKey[]) => keys.filter((k) => k !== 'finished'),
  (keys: ListKey[]) => keys.filter((k) => k !== 'failed'),
  (keys: ListKey[]) => keys.filter((k) => k !== 'finishedRate'),
  (keys: ListKey[]) => keys.filter((k) => k !== 'failedRate'),
  (keys: ListKey[]) => keys.filter((k) => k !== 'inFlight'),
]) {
  LIST_STEPS.push(change(LIST_STEPS.at(-1)!));
}
/** The steps after which names are cut before another column goes (index in {@link LIST_STEPS}). */
const CUT_NAMES_FROM = 6;
/** Where names are cut when only a long one keeps a set of columns from fitting, and the least they are cut to. */
const NAME_CUT = 30;
const NAME_LEAST = 12;
/** Between two columns of the table drawn without borders. */
const GAP = '  ';

/** Where the host and the queue's name are cut, in terminal cells (a paused queue's mark comes after its name's cells). */
interface NameCut {
  host: number;
  queue: number;
}

/**
 * Where names may be cut, from the least cut: whole, or at 30 cells; with `further`, as far as it
 * takes, the host first (a host is often the same on every row), then the queue's name, to 12 cells each.
 */
function nameCuts(longest: NameCut, further: boolean): NameCut[] {
  const cuts = [longest, { host: Math.min(NAME_CUT, longest.host), queue: Math.min(NAME_CUT, longest.queue) }];
  if (!further) return cuts;
  for (let host = longest.host; host >= NAME_LEAST; host--) cuts.push({ host, queue: longest.queue });
  const host = Math.min(NAME_LEAST, longest.host);
  for (let queue = longest.queue; queue >= NAME_LEAST; queue--) cuts.push({ host, queue });
  return cuts;
}

/**
 * `svcq queues`: one row per defined queue; rates are per second over the last minute. Given the
 * terminal's width in `columns`, the table fits it: the bordered table when it fits whole, else a
 * table without borders with the most columns that fit (see {@link LIST_STEPS}), its host and queue
 * names cut in their middle if need be (to no fewer than 12 cells). A number is never cut: a column
 * is as wide as its widest figure, or left out, and a line under the table names what was left out.
 */
export function queueListTable(list: QueueList, columns?: number): string {
  if (list.queues.length === 0) return 'no queues defined';
  const note = 'rates per second over the last 60 s';
  const full = table(
    FULL_LIST.map((k) => LIST_COLUMNS[k].head),
    list.queues.map((q) => FULL_LIST.map((k) => LIST_COLUMNS[k].cell(q))),
    FULL_LIST.map((k) => LIST_COLUMNS[k].align),
  );
  if (columns === undefined || full.split('\n').every((line) => stringWidth(line) <= columns)) return `${full}\n${note}`;
  let chosen: { keys: ListKey[]; cut: NameCut } | undefined;
  const longest = { host: Math.max(...list.queues.map((q) => stringWidth(q.host))), queue: Math.max(...list.queues.map((q) => stringWidth(q.name))) };
  for (const [step, keys] of LIST_STEPS.entries()) {
    const widthAt = widthWithNames(list.queues, keys);
    const cut = nameCuts(longest, step >= CUT_NAMES_FROM).find((c) => widthAt(c) <= columns);
    if (cut !== undefined) {
      chosen = { keys, cut };
      break;
    }
  }
  // Too narrow even for host, queue, pending and the oldest age: those, cut no further, and the terminal wraps them.
  chosen ??= { keys: LIST_STEPS.at(-1)!, cut: { host: NAME_LEAST, queue: NAME_LEAST } };
  const { keys, cut } = chosen;
  const left = FULL_LIST.filter((k) => !keys.includes(k) && !(keys.includes('inFlight') && (k === 'claimed' || k === 'processing')) && !(k === 'oldestPending' && keys.includes('oldest')));
  const notes = keys.some((k) => LIST_COLUMNS[k].head.endsWith('/s')) ? [note] : [];
  if (keys.includes('inFlight')) notes.push('in flight: claimed + processing');
  if (left.length > 0) notes.push(`not shown (too narrow): ${left.map((k) => LIST_COLUMNS[k].head).join(', ')}; --json has them`);
  return [plainTable(list.queues, keys, cut), ...notes.flatMap((n) => wrap(n, columns))].join('\n');
}

/** A queue's cells for `keys`, the host and the queue's name cut as `cut` says (in their middle; a paused queue's mark after it, whole). */
function plainCells(q: QueueEntry, keys: ListKey[], cut: NameCut): string[] {
  const fit = (text: string, cells: number): string => (stringWidth(text) <= cells ? text : clipMiddle(text, cells - 1));
  return keys.map((k) => (k === 'host' ? fit(q.host, cut.host) : k === 'queue' ? chalk.bold(fit(q.name, cut.queue)) + pausedMark(q) : LIST_COLUMNS[k].cell(q)));
}

/** Each column's width: its heading's or its widest cell's. */
function columnWidths(queues: QueueEntry[], keys: ListKey[], cut: NameCut): number[] {
  const rows = queues.map((q) => plainCells(q, keys, cut));
  return keys.map((k, i) => Math.max(stringWidth(LIST_COLUMNS[k].head), ...rows.map((r) => stringWidth(r[i]!))));
}

/** The width of the borderless table of `keys` as a function of where names are cut: the figures' columns are measured once. */
function widthWithNames(queues: QueueEntry[], keys: ListKey[]): (cut: NameCut) => number {
  const whole = { host: Infinity, queue: Infinity };
  const figures = columnWidths(queues, keys.filter((k) => k !== 'host' && k !== 'queue'), whole).reduce((sum, w) => sum + w, 0);
  const gaps = (keys.length - 1) * GAP.length;
  const [host] = columnWidths(queues, ['host'], whole) as [number];
  const names = queues.map((q) => ({ width: stringWidth(q.name), mark: pausedMarkWidth(q) }));
  // Each name whole or cut to `cells`, a paused one's mark after it.
  const queue = (cells: number): number => Math.max(...names.map(({ width, mark }) => Math.min(width, cells) + mark));
  return (cut) => figures + gaps + Math.max('host'.length, Math.min(cut.host, host)) + Math.max('queue'.length, queue(cut.queue));
}

/** The table without borders: a bold heading, columns two spaces apart, no space at a line's end. */
function plainTable(queues: QueueEntry[], keys: ListKey[], cut: NameCut): string {
  const widths = columnWidths(queues, keys, cut);
  const line = (cells: string[]): string =>
    cells
      .map((text, i) => {
        const gap = ' '.repeat(widths[i]! - stringWidth(text));
        return LIST_COLUMNS[keys[i]!].align === 'left' ? text + gap : gap + text;
      })
      .join(GAP)
      .trimEnd();
  return [chalk.bold(line(keys.map((k) => LIST_COLUMNS[k].head))), ...queues.map((q) => line(plainCells(q, keys, cut)))].join('\n');
}

/** `text` broken at spaces into lines of at most `columns` cells (a word longer than that stays whole). */
function wrap(text: string, columns: number): string[] {
  const lines: string[] = [];
  let current = '';
  for (const word of text.split(' ')) {
    if (current !== '' && stringWidth(current) + 1 + stringWidth(word) > columns) {
      lines.push(current);
      current = word;
    } else current = current === '' ? word : `${current} ${word}`;
  }
  return [...lines, current];
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
  if (q.paused) lines.push(chalk.yellow(`paused: its claims find nothing until svcq resume ${q.host}/${q.name}`));
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
  const flow = [...pushLines(q), ...flowLines(q)];
  // decisions §9.2: absent from servers before callbacks.
  const callbacks = q.callbacks;
  if (callbacks) flow.push(`${chalk.bold('callbacks owed:')} ${callbacks.owed}${callbacks.failing > 0 ? `, ${chalk.red(`${callbacks.failing} failing`)} (tried again with backoff for 24 hours after their item ended)` : ''}`);
  if (flow.length > 0) lines.push('', ...flow);
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
  const schedules = q.schedules ?? [];
  if (schedules.length > 0) {
    lines.push('');
    lines.push(chalk.bold(`schedules (${schedules.length})`));
    lines.push(
      table(
        ['name', 'next', 'last', 'last item'],
        schedules.map((sc) => [sc.name, sc.next === null ? '-' : localTime(sc.next), sc.last === null ? '-' : localTime(sc.last), sc.lastId ?? '-']),
        ['left', 'left', 'left', 'left'],
      ),
    );
  }
  return lines.join('\n');
}

/**
 * decisions §8.5, §8.6: the queue's limits and what they did, as `svcq queue` shows them; nothing
 * for a queue without limits, dead letters or held claims (or from a server before them).
 */
export function flowLines(q: QueueEntry): string[] {
  const lines: string[] = [];
  const l = q.limits;
  const parts: string[] = [];
  if (l?.maxActive != null) parts.push(`maxActive ${l.maxActive} (${q.active ?? 0} active)`);
  else if (l) parts.push(`${q.active ?? 0} active, no maxActive`);
  if (l?.groupMaxActive != null) parts.push(`groupMaxActive ${l.groupMaxActive}`);
  if (l?.rateLimit) parts.push(`rateLimit ${l.rateLimit.max} per ${l.rateLimit.perSeconds} s`);
  if (l?.fairness === 'groups') parts.push('fairness groups');
  const limited = l !== undefined && (l.maxActive !== null || l.groupMaxActive !== null || l.rateLimit !== null || l.fairness === 'groups');
  if (limited) lines.push(`${chalk.bold('limits:')} ${parts.join(', ')}`);
  const held = q.held;
  const heldTotal = held ? held.paused + held.maxActive + held.groupMaxActive + held.rateLimit : 0;
  if (held && (limited || heldTotal > 0)) {
    const by = (['maxActive', 'rateLimit', 'groupMaxActive', 'paused'] as const).filter((r) => held[r] > 0).map((r) => `${r} ${held[r]}`);
    lines.push(`${chalk.bold('claims held back')} (this node, since it started): ${heldTotal === 0 ? 'none' : `${heldTotal} (${by.join(', ')})`}`);
  }
  if (q.groupsWaiting != null) lines.push(`${chalk.bold('groups waiting:')} ${q.groupsWaiting}`);
  if (l?.deadLetter != null) {
    const dead = q.deadLetters;
    lines.push(`${chalk.bold('dead letters:')} ${dead === null || dead === undefined ? `${l.deadLetter} is not defined (failed items are not copied)` : `${count(dead, dead > 0 ? chalk.red : undefined)} pending in ${l.deadLetter} (svcq redrive ${q.host}/${l.deadLetter} sends them back)`}`);
  }
  return lines;
}

/**
 * decisions §9.1: a push queue's target and its health on the node that answered, as `svcq queue`
 * shows them; nothing for other queues (or from a server before push queues).
 */
export function pushLines(q: QueueEntry): string[] {
  const p = q.push;
  if (!p) return [];
  const lines = [`${chalk.bold('push to:')} ${printable(p.url)}`];
  const ahead = p.claimedAhead ? `, ${p.claimedAhead} claimed ahead` : '';
  const inFlight = `${p.inFlight} of ${p.concurrency} deliveries in flight on this node${ahead}`;
  lines.push(`${chalk.bold('target:')} ${pushHealth(q) ?? ''}, ${inFlight}`);
  if (p.last) lines.push(`${chalk.bold('last delivery:')} ${p.last.outcome}${p.last.code === null ? ', no answer' : ` (${p.last.code})`} in ${p.last.ms} ms at ${localTime(p.last.at)}`);
  if (p.lastError !== null && p.failing) lines.push(`${chalk.bold('last error:')} ${chalk.red(printable(p.lastError))}`);
  return lines;
}

/** decisions §9.1: a push queue's target health in a word or three (`ok`, `failing (3 in a row)`, `not allowed`), painted; null for other queues. */
export function pushHealth(q: QueueEntry): string | null {
  const p = q.push;
  if (!p) return null;
  if (p.refused) return chalk.red('not allowed (outside --push-allow)');
  if (p.failing) return chalk.red(`failing (${p.consecutiveFailures} in a row)`);
  return p.last === null ? chalk.dim('no delivery yet') : chalk.green('ok');
}

/** Time left on a lease; a lease already past its end (not yet applied) says so. */
export function leaseLeftText(ms: number): string {
  return ms < 0 ? `ended ${humanAge(-ms)} ago` : humanAge(ms);
}

/** {@link leaseLeftText}, in red for a lease past its end. */
export function leaseLeft(ms: number): string {
  return ms < 0 ? chalk.red(leaseLeftText(ms)) : leaseLeftText(ms);
}
