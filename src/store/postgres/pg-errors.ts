import pg from 'pg';

/** A guarded UPDATE or DELETE found the row changed under it: the transaction is tried again. */
export class StaleWrite extends Error {
  constructor(what: string) {
    super(`a write lost a race: ${what} changed under it`);
  }
}

/**
 * A transaction that sent its first statements before its limiter rows were locked found, once
 * they were, that it cannot go on as sent (its time moved past a queue's quiet window, or a
 * limiter row was missing): it is rolled back and runs again, awaiting the rows first.
 */
export class LockedLate extends Error {
  constructor(what: string) {
    super(`the limiter rows were locked too late: ${what}`);
  }
}

/**
 * What a failed transaction means for the calls in it:
 * - `retry`: rolled back by the database for a reason that passes (deadlock, serialization
 *   failure) or a guarded write lost a race; nothing was committed, the transaction may run again.
 * - `statement`: one statement was refused (a constraint, a value the database cannot hold);
 *   the connection is fine, and the other calls folded into the transaction may run without it.
 * - `connection`: the database or the connection to it failed; whether a COMMIT in flight was
 *   applied is unknown, so nothing is tried again: every call in it is refused.
 */
export type FailureKind = 'retry' | 'statement' | 'connection';

export function failureKind(err: unknown): FailureKind {
  if (err instanceof StaleWrite || err instanceof LockedLate) return 'retry';
  if (!(err instanceof pg.DatabaseError)) return 'connection';
  const code = err.code ?? '';
  if (code === '40001' || code === '40P01') return 'retry';
  // 08: connection exception; 53: insufficient resources; 57: operator intervention (shutdown,
  // pg_terminate_backend, statement timeout); 58: system error (I/O); XX: internal error.
  if (/^(08|53|57|58|XX)/.test(code)) return 'connection';
  return 'statement';
}
