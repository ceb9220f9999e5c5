import chalk from 'chalk';
import Table from 'cli-table3';
import stringWidth from 'string-width';

/** What `GET /api/v2/logs` answers (interface §4.6). */
export interface LogList {
  active: { size: number } | null;
  rotated: Array<{ ts: number; size: number }>;
}

/** The paths of the requests that read the access log itself: a follower's own polls are among them. */
export const LOG_READ_PATHS = new Set(['/api/v2/logs', '/api/v2/logs/file']);

/** Whether an access-log line (decisions §5) records a request that read the access log. */
export function isLogRead(line: string): boolean {
  try {
    const record = JSON.parse(line) as { path?: unknown };
    return typeof record.path === 'string' && LOG_READ_PATHS.has(record.path);
  } catch {
    return false;
  }
}

/** What `GET /api/v2/stats` answers. */
export interface StatList {
  interval: number;
  files: Array<{ name: string; type: string; date: string; size: number }>;
}

/** What `GET /api/v2/tasks` answers. */
export interface TaskList {
  files: Array<{ name: string; date: string; size: number }>;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/**
 * `1536` → `1.5 KiB`. With `step` (the difference that must stay visible, in bytes, e.g. between two
 * rows of a chart's axis) as many decimals as tell values `step` apart, at most 2.
 */
export function humanBytes(bytes: number, step?: number): string {
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  if (unit === 0) return `${value} B`;
  const decimals = step === undefined ? (Math.abs(value) < 10 ? 1 : 0) : Math.max(Math.abs(value) < 10 ? 1 : 0, decimalsFor(step / 1024 ** unit));
  return `${value.toFixed(decimals)} ${UNITS[unit]}`;
}

/** Decimals that show a difference of `step` (0 for a step of 1 or more, 1 for 0.1, at most 2). */
export function decimalsFor(step: number): number {
  if (!(step > 0) || step >= 1) return 0;
  return Math.min(2, Math.ceil(-Math.log10(step)));
}

/** `93784` → `1d 2h 3m`. */
export function humanDuration(seconds: number): string {
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d > 0) return `${d}d ${h}h ${m}m`;
  if (h > 0) return `${h}h ${m}m`;
  return `${m}m ${Math.floor(seconds % 60)}s`;
}

/**
 * Text that came from a client (a worker's name, say) as it may be written to a terminal: each
 * control character, C0, DEL or C1, becomes `?`, so that the text cannot move the cursor, clear
 * or colour the screen, or break a line.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is being replaced
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** The longest start of `text` that fits in `cells` terminal cells, cut between whole characters. */
export function clip(text: string, cells: number): string {
  let out = '';
  let used = 0;
  for (const { segment } of graphemes.segment(text)) {
    const w = stringWidth(segment);
    if (used + w > cells) break;
    out += segment;
    used += w;
  }
  return out;
}

/** `text` cut to `cells` terminal cells and an ellipsis in its middle, its start and its end kept (the end given any odd cell). */
export function clipMiddle(text: string, cells: number): string {
  const parts = Array.from(graphemes.segment(text), ({ segment }) => segment);
  let end = '';
  let used = 0;
  for (let i = parts.length - 1; i >= 0; i--) {
    const w = stringWidth(parts[i]!);
    if (used + w > Math.ceil(cells / 2)) break;
    end = parts[i] + end;
    used += w;
  }
  return `${clip(text, cells - used)}…${end}`;
}

/** A ms timestamp as local `YYYY-MM-DD HH:MM:SS.mmm`. */
export function localTime(ms: number): string {
  const d = new Date(ms);
  const pad = (n: number, w = 2): string => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** A table with a bold header; sizes are right-aligned by the caller's `align`. */
export function table(head: string[], rows: string[][], align?: Array<'left' | 'right'>): string {
  const t = new Table({
    head: head.map((h) => chalk.bold(h)),
    colAligns: align,
    style: { head: [], border: [] },
    // No rule between rows: a day's worth of files stays compact.
    chars: { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' },
  });
  t.push(...rows);
  return t.toString();
}

export function logListTable(list: LogList): string {
  const rows = list.rotated.map((r) => [`access-${r.ts}.log`, String(r.ts), localTime(r.ts), humanBytes(r.size)]);
  rows.push([chalk.green('access.log (active)'), 'active', '', list.active ? humanBytes(list.active.size) : chalk.dim('none')]);
  const total = list.rotated.reduce((sum, r) => sum + r.size, list.active?.size ?? 0);
  return `${table(['file', '--which', 'rotated at', 'size'], rows, ['left', 'left', 'left', 'right'])}\n${list.rotated.length} rotated, ${humanBytes(total)} in all`;
}

export function statListTable(list: StatList): string {
  if (list.files.length === 0) return `no stats files yet (sampled every ${list.interval / 1000} s)`;
  const rows = list.files.map((f) => [f.name, f.type, f.date, humanBytes(f.size)]);
  return `${table(['name', 'type', 'date (UTC)', 'size'], rows, ['left', 'left', 'left', 'right'])}\nsampled every ${list.interval / 1000} s`;
}

export function taskListTable(list: TaskList): string {
  if (list.files.length === 0) return 'no task history yet';
  const rows = list.files.map((f) => [f.name, f.date, humanBytes(f.size)]);
  return table(['name', 'date (UTC)', 'size'], rows, ['left', 'left', 'right']);
}

/** The lines of a JSON-lines file as values (for --json); a line that does not parse is kept as its text. */
export function parseJsonLines(text: string): unknown[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line) => {
      try {
        return JSON.parse(line) as unknown;
      } catch {
        return line;
      }
    });
}
