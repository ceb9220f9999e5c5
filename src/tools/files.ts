import { readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';

/**
 * Where the tools keep their files under `<root>/_svcq`, and the only names a request may ask
 * for. A name from a request is matched against these exact shapes as a plain string; nothing
 * else reaches the file system (interface §4.6).
 */

export const STAT_TYPES = ['cpu', 'memory', 'disk', 'diskio', 'netio'] as const;
export type StatType = (typeof STAT_TYPES)[number];

export const PAYLOAD_KINDS = ['item', 'progress', 'result', 'error'] as const;

export const ACTIVE_LOG = 'access.log';

const ROTATED_LOG = /^access-(\d{1,15})\.log$/;
const STAT_FILE = /^(cpu|memory|disk|diskio|netio)-(\d{4}-\d{2}-\d{2})\.log$/;
const TASK_FILE = /^tasks-(\d{4}-\d{2}-\d{2})\.log$/;
const ITEM_ID = /^[0-9a-f]{16}$/;

export function logsDir(home: string): string {
  return path.join(home, 'logs');
}
export function statsDir(home: string): string {
  return path.join(home, 'stats');
}
export function tasksDir(home: string): string {
  return path.join(home, 'tasks');
}
export function payloadsDir(home: string): string {
  return path.join(home, 'payloads');
}

/** `YYYY-MM-DD` of a UTC day. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export function rotatedLogName(ts: number): string {
  return `access-${ts}.log`;
}

/** The `ts` of a rotated log's file name, or undefined for any other name. */
export function rotatedLogTs(name: string): number | undefined {
  const m = ROTATED_LOG.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** A `which=` value: `active`, or the decimal `ts` of a rotated file. */
export function parseWhich(which: string): { active: true } | { ts: number } | undefined {
  if (which === 'active') return { active: true };
  if (/^\d{1,15}$/.test(which)) return { ts: Number(which) };
  return undefined;
}

export function statFileName(type: StatType, day: string): string {
  return `${type}-${day}.log`;
}

export function parseStatFile(name: string): { type: StatType; date: string } | undefined {
  const m = STAT_FILE.exec(name);
  return m ? { type: m[1] as StatType, date: m[2]! } : undefined;
}

export function taskFileName(day: string): string {
  return `tasks-${day}.log`;
}

export function parseTaskFile(name: string): { date: string } | undefined {
  const m = TASK_FILE.exec(name);
  return m ? { date: m[1]! } : undefined;
}

export function isItemId(id: string): boolean {
  return ITEM_ID.test(id);
}

export function isPayloadKind(kind: string): kind is (typeof PAYLOAD_KINDS)[number] {
  return (PAYLOAD_KINDS as readonly string[]).includes(kind);
}

/** Size of a file, or null when there is none (a rotation may have just moved it). */
export async function sizeOf(file: string): Promise<number | null> {
  try {
    const s = await stat(file);
    return s.isFile() ? s.size : null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** The files of `dir` whose names `accept` takes, with their sizes, sorted by name; none when the folder does not exist yet. */
export async function listFiles<T>(dir: string, accept: (name: string) => T | undefined): Promise<Array<T & { name: string; size: number }>> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: Array<T & { name: string; size: number }> = [];
  for (const name of names.sort()) {
    const parsed = accept(name);
    if (parsed === undefined) continue;
    const size = await sizeOf(path.join(dir, name));
    if (size !== null) out.push({ ...parsed, name, size });
  }
  return out;
}

/**
 * Removes the day-files of `dir` (names `dateOf` gives a UTC date) of days more than `keepDays`
 * before `now`'s UTC day, in name order, except those `spare` keeps; the names removed. With 3 on
 * 2026-01-09, those of 2026-01-05 and before go. `keepDays` 0 removes none.
 */
export async function removeOldDayFiles(dir: string, dateOf: (name: string) => string | undefined, keepDays: number, now: number, spare: (date: string) => boolean = () => false): Promise<string[]> {
  if (keepDays <= 0) return [];
  const oldestKept = utcDay(now - keepDays * 86_400_000);
  const removed: string[] = [];
  for (const name of (await readdir(dir)).sort()) {
    const date = dateOf(name);
    if (date === undefined || date >= oldestKept || spare(date)) continue;
    await rm(path.join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}
