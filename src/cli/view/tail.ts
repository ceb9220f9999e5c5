import { setTimeout as sleep } from 'node:timers/promises';
import { ClientError, type SvcqClient } from '../../client/client.js';
import type { LogList } from './format.js';

export interface TailOptions {
  /** Where new bytes go, whole lines only. */
  write: (chunk: Buffer) => void;
  /** Pause between polls (default 1000 ms). */
  intervalMs?: number;
  /** Stops the loop. */
  signal?: AbortSignal;
  /**
   * Told, once, when a poll fails for a reason that may pass (the server cannot be reached, or
   * answers 5xx: a restart, say), and once more when a poll succeeds again; polling goes on
   * meanwhile, from where it was. Any other failure ends the loop.
   */
  trouble?: (line: string) => void;
}

/** Bytes up to and including the last newline: a line still being written waits for the next poll. */
export function wholeLines(chunk: Buffer): Buffer {
  return chunk.subarray(0, chunk.lastIndexOf(0x0a) + 1);
}

/** How far back from the end the first read for the last lines starts; each further read goes four times as far. */
const FIRST_WINDOW = 16 * 1024;

/**
 * The last `count` lines that pass `keep` of a file that only grows, read from its end with
 * `Range: bytes=N-` (interface §4.6) rather than whole, and the offset just after the last whole
 * line, from which a follower carries on. `size` is the file's size as its list says; the file
 * may have grown since, which only means more is read.
 */
export async function lastLines(
  read: (from: number) => Promise<Buffer>,
  size: number,
  count: number,
  keep: (line: string) => boolean = () => true,
): Promise<{ lines: string[]; end: number }> {
  for (let window = FIRST_WINDOW; ; window *= 4) {
    const from = Math.max(0, size - window);
    // Read from the byte before `from`: if it is a newline, the line at `from` is whole.
    const start = from > 0 ? from - 1 : 0;
    const chunk = await read(start);
    const newline = chunk.indexOf(0x0a);
    // Not one newline past `from`: the window is inside a single line, read further back.
    if (from > 0 && newline < 0) continue;
    const skip = from > 0 ? newline + 1 : 0;
    const whole = wholeLines(chunk.subarray(skip));
    const end = start + skip + whole.length;
    const lines = whole.toString('utf8').split('\n').filter((line) => line !== '' && keep(line));
    if (lines.length >= count || from === 0) return { lines: count === 0 ? [] : lines.slice(-count), end };
  }
}

/** The whole lines of `chunk` that pass `keep`, as one buffer (empty when none do). */
export function keepLines(chunk: Buffer, keep: (line: string) => boolean): Buffer {
  const lines = chunk.toString('utf8').split('\n');
  lines.pop();
  const kept = lines.filter(keep);
  return Buffer.from(kept.length ? `${kept.join('\n')}\n` : '');
}

/**
 * Runs `poll` after each pause until the signal aborts. A poll that fails transiently is
 * told of (once per outage) and simply retried at the next pause; any other failure ends the loop.
 */
async function everyPause(options: TailOptions, poll: () => Promise<void>): Promise<void> {
  let down = false;
  while (await pause(options)) {
    try {
      await poll();
    } catch (err) {
      if (!(err instanceof ClientError) || !err.transient) throw err;
      if (!down) options.trouble?.(`${err.message}; trying again every ${Math.round((options.intervalMs ?? 1000) / 100) / 10} s`);
      down = true;
      continue;
    }
    if (down) options.trouble?.('the server answers again; following on');
    down = false;
  }
}

async function pause(options: TailOptions): Promise<boolean> {
  try {
    await sleep(options.intervalMs ?? 1000, undefined, { signal: options.signal });
    return true;
  } catch {
    return false;
  }
}

/**
 * Follows a day-file that only grows (stats, tasks), like `tail -f`: each poll asks for the bytes
 * from the last offset on with `Range: bytes=N-`. Runs until the signal aborts.
 */
export async function tailFile(client: SvcqClient, endpoint: string, query: Record<string, string>, from: number, options: TailOptions): Promise<void> {
  let offset = from;
  await everyPause(options, async () => {
    const lines = wholeLines(await client.toolFile(endpoint, query, offset));
    if (lines.length === 0) return;
    options.write(lines);
    offset += lines.length;
  });
}

/**
 * Follows the active access log across rotations, like `tail -F`, from `from.offset` in the
 * active file as it was when the newest rotated file was `from.newest`. A rotated file that appeared
 * since the last poll is the file that was being read: its rest is read from the old offset (and
 * any file rotated after it whole), then the new active file from its start. An active file that
 * shrank without a rotation is read again from its start. Bytes read from the active file are
 * printed only when no rotation happened around the read.
 */
export async function tailAccessLog(client: SvcqClient, from: { offset: number; newest: number }, options: TailOptions): Promise<void> {
  // Where the caller's read ended, and the newest rotated file then: a rotation after it is
  // found by the first poll, and the rest of the file read is taken from the rotated file.
  let offset = from.offset;
  let newest = from.newest;
  await everyPause(options, async () => {
    const list = await client.tool<LogList>('logs');
    const fresh = list.rotated.filter((r) => r.ts > newest);
    if (fresh.length > 0) {
      for (const [i, file] of fresh.entries()) {
        const rest = await client.toolFile('logs/file', { which: String(file.ts) }, i === 0 ? offset : 0);
        if (rest.length > 0) options.write(rest);
      }
      newest = newestRotated(list);
      offset = 0;
    } else if (list.active && list.active.size < offset) {
      offset = 0;
    }
    if (!list.active) return;
    const lines = wholeLines(await client.toolFile('logs/file', { which: 'active' }, offset));
    if (lines.length === 0) return;
    // The read may have met the file that replaced the listed one, at an offset that means nothing
    // there. A rotation leaves a rotated file: when none appeared since the list, the bytes are
    // the listed file's; otherwise they are dropped and the next poll reads the rest of the listed
    // file (now rotated) from `offset`, then the new one from its start.
    if (newestRotated(await client.tool<LogList>('logs')) > newest) return;
    options.write(lines);
    offset += lines.length;
  });
}

/** The ts of the newest rotated file of a list (0 when none): a later list with a newer one saw a rotation. */
export function newestRotated(list: LogList): number {
  return list.rotated.reduce((max, r) => Math.max(max, r.ts), 0);
}
