import type pg from 'pg';

/**
 * How long a statement or a transaction may wait for the database before its connection is cut.
 * A network that drops packets without closing the connection would otherwise hold the request
 * until TCP gives up (about 15 minutes on Linux).
 */
export const ANSWER_TIMEOUT_MS = 10_000;

/**
 * Cuts a connection at once: its queries fail now, as when the database closes it. (`end()` would
 * send a goodbye and wait for an answer that a silent network never brings.)
 */
function cut(client: pg.Client, err: Error): void {
  const stream = (client as unknown as { connection?: { stream?: { destroy(err?: Error): void } } }).connection?.stream;
  if (stream) stream.destroy(err);
  else void client.end().catch(() => undefined);
}

/** The error a statement fails with when its connection was cut for not answering. */
function notAnswered(timeoutMs: number): Error {
  return new Error(`PostgreSQL did not answer within ${timeoutMs / 1000} s`);
}

/**
 * One statement on a connection of `pool`, as `pool.query` runs it, but cut after `timeoutMs`
 * without an answer (it then rejects with "PostgreSQL did not answer within …", and the
 * connection is dropped, not returned to the pool). For reads outside the store's transactions:
 * status reads, the operators' views, the task history and definitions.
 */
export async function answered<R extends pg.QueryResultRow>(pool: pg.Pool, timeoutMs: number, query: string | pg.QueryConfig, values?: unknown[]): Promise<pg.QueryResult<R>> {
  const client = await pool.connect();
  const watched = watch(client, timeoutMs);
  let failed: Error | undefined;
  try {
    return await client.query<R>(query, values);
  } catch (err) {
    // As pool.query does: a connection whose statement failed is not handed out again.
    failed = watched.broken ?? (err as Error);
    throw failed;
  } finally {
    watched.stop();
    client.release(failed ?? watched.broken);
  }
}

/**
 * Gives every connection of `pool` a listener for 'error' for as long as it lives. pg-pool takes
 * its own listener off a connection as it hands it out, and the caller can attach one only when
 * its `await pool.connect()` resumes: an error read in the same chunk as the connection's ready
 * answer (the database ending it as it opens, pg_terminate_backend) is emitted in between, and an
 * 'error' event nobody listens to ends the process. The failure still reaches whoever uses the
 * connection: its next statement fails (the connection is then not queryable).
 */
export function keepConnectionErrors(pool: pg.Pool): void {
  pool.on('connect', (client) => client.on('error', () => undefined));
}

/**
 * Watches a connection checked out for a transaction (or a dedicated one while it runs a
 * statement): after `timeoutMs` it is cut (its pending statements fail at once). `stop()` before
 * releasing it; `broken` says why it failed, if it did.
 */
export function watch(client: pg.Client, timeoutMs: number): { stop(): void; readonly broken: Error | undefined } {
  let broken: Error | undefined;
  const onError = (err: Error): void => {
    broken ??= err;
  };
  client.on('error', onError);
  const watchdog = setTimeout(() => {
    broken = notAnswered(timeoutMs);
    cut(client, broken);
  }, timeoutMs);
  return {
    stop() {
      clearTimeout(watchdog);
      client.off('error', onError);
    },
    get broken() {
      return broken;
    },
  };
}
