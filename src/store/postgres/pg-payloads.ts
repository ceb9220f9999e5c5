import type pg from 'pg';
import type { PayloadKind } from '../store.js';

/** One payload to archive: validated names, and the body as the store received it. */
export interface Payload {
  host: string;
  queue: string;
  id: string;
  kind: PayloadKind;
  body: string;
}

/** Runs one statement (the store's guarded read: see pg-guard.ts, `answered`). */
type Read = (text: string, values: unknown[]) => Promise<pg.QueryResult<{ body: Buffer }>>;

/** A transaction of the store: runs a named statement (see postgres-store.ts, Tx.query). */
interface Transaction {
  query(statement: { name: string; text: string; plan?: 'custom' | 'generic' }, values: unknown[]): Promise<unknown>;
}

/**
 * Archives payloads inside the caller's transaction (decisions §5: written before the reply that
 * accepted them, in the same COMMIT as their change, so a change that is rolled back leaves no
 * payload, and an acknowledged one always has it). Each (host, queue, id, kind) holds the latest:
 * a later progress or error replaces the earlier. `payloads` must name each key once (one
 * statement cannot update a row twice). The body is stored as its UTF-8 bytes (`bytea`, whatever
 * the database's encoding), as the file archive writes it.
 */
export async function writePayloads(tx: Transaction, payloads: readonly Payload[], now: number): Promise<void> {
  if (payloads.length === 0) return;
  await tx.query(
    {
      // An insert from arrays: one plan whatever the table's size, kept.
      plan: 'generic',
      name: 'svcq_write_payloads',
      text: `INSERT INTO svcq_payloads (host, queue, id, kind, body, updated_at)
     SELECT p.host, p.queue, p.id, p.kind, p.body, $6
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[]) AS p(host, queue, id, kind, body)
     ON CONFLICT (host, queue, id, kind) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`,
    },
    [payloads.map((p) => p.host), payloads.map((p) => p.queue), payloads.map((p) => p.id), payloads.map((p) => p.kind), payloads.map((p) => Buffer.from(p.body, 'utf8')), now],
  );
}

/**
 * An archived payload's exact bytes, or null when none is archived. For the tools endpoint
 * `GET /api/v2/tasks/payload` (interface §4.6): callers pass only validated host, queue, id and
 * kind. Reads committed data only: every node answers the same.
 */
export async function readPayload(read: Read, host: string, queue: string, id: string, kind: PayloadKind): Promise<Buffer | null> {
  const res = await read('SELECT body FROM svcq_payloads WHERE host = $1 AND queue = $2 AND id = $3 AND kind = $4', [host, queue, id, kind]);
  return res.rows[0]?.body ?? null;
}
