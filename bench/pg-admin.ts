/**
 * What the PostgreSQL benches share: the URL of another database on the server `--store` names,
 * a database made for a run, one statement on a connection of its own, and the CPU of the backends serving a database.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';

/** `base` (a postgres:// URL) with its database replaced by `database`. */
export function databaseUrl(base: string, database: string): string {
  const u = new URL(base);
  u.pathname = `/${database}`;
  return u.toString();
}

/** A database made for this run on the server `base` names (`<prefix>_<pid>`), its URL, and its drop. */
export async function freshDatabase(base: string, prefix: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `${prefix}_${process.pid}`;
  await query(base, 'postgres', `CREATE DATABASE ${name}`);
  return { url: databaseUrl(base, name), drop: async () => void (await query(base, 'postgres', `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)) };
}

/** Runs one statement on a connection of its own to `database`, and closes it. */
export async function query<T = Record<string, unknown>>(base: string, database: string, text: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: databaseUrl(base, database) });
  await client.connect();
  try {
    return (await client.query(text)).rows as T[];
  } finally {
    await client.end();
  }
}

/** CPU seconds used so far by each backend process serving `database` (from /proc: this machine's PostgreSQL), the asking one left out. */
export async function backendCpuSeconds(base: string, database: string): Promise<Map<number, number>> {
  const rows = await query<{ pid: number }>(base, 'postgres', `SELECT pid FROM pg_stat_activity WHERE datname = '${database}' AND pid <> pg_backend_pid()`);
  const out = new Map<number, number>();
  for (const { pid } of rows) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime and stime, in clock ticks of 1/100 s.
      out.set(pid, (Number(fields[11]) + Number(fields[12])) / 100);
    } catch {
      // the backend ended meanwhile
    }
  }
  return out;
}

/** What the buffer pool and the WAL of the server have done so far (cumulative counters). */
export interface BufferCounters {
  /** Blocks of `database` read from outside the buffer pool, and found in it. */
  read: number;
  hit: number;
  /** Dirty buffers written out by a backend itself to make room (the background writer and the checkpoints write the others). */
  backendWrites: number;
  /** Full-page images written to the WAL, and the WAL's bytes. */
  fullPages: number;
  walBytes: number;
}

/** The server's {@link BufferCounters} now (pg_stat_database, pg_stat_bgwriter, pg_stat_wal: PostgreSQL 14 or later). */
export async function bufferCounters(base: string, database: string): Promise<BufferCounters> {
  const [row] = await query<Record<keyof BufferCounters, number>>(
    base,
    'postgres',
    `SELECT d.blks_read::float8 AS "read", d.blks_hit::float8 AS "hit", b.buffers_backend::float8 AS "backendWrites", w.wal_fpi::float8 AS "fullPages", w.wal_bytes::float8 AS "walBytes"
       FROM pg_stat_database d, pg_stat_bgwriter b, pg_stat_wal w WHERE d.datname = '${database}'`,
  );
  return row!;
}
