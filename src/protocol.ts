/**
 * The queue endpoints' requests and answers (interface §4.1–§4.3), in one place for both sides:
 * the server compiles its request validators from the schemas here, and the client's types are
 * these. A request type is derived from its schema, so that the two cannot drift apart.
 */

/** Most items one claim may ask for, and most hand-ins it may carry (decisions §3.8). */
export const MAX_CLAIM = 100;
export const MAX_DONE = 100;

/** What an `Idempotency-Key` must be (decisions §3.5), as the server says it when it refuses one. */
export const IDEMPOTENCY_KEY_RULE = 'must be 1 to 200 printable ASCII characters';

/** An `Idempotency-Key` the server takes (decisions §3.5: 1–200 printable characters). */
export function isIdempotencyKey(key: unknown): key is string {
  return typeof key === 'string' && /^[\x20-\x7e]{1,200}$/.test(key);
}

/** Most items one batch post may carry, and its largest body (decisions §3.8). */
export const MAX_BATCH = 1000;
export const MAX_BATCH_BYTES = 16 * 1024 * 1024;

/**
 * JSON schema of one hand-in: an item's id with exactly one of its result or its error (decisions
 * §3.8 `done`); an error may carry the worker's wish, `retryIn` or `final` (not both, §8.2).
 */
const DONE_ENTRY_SCHEMA = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    result: { type: 'object' },
    error: { type: 'object' },
    retryIn: { type: 'integer', minimum: 0, maximum: 31536000 },
    final: { type: 'boolean' },
  },
  required: ['id'],
  additionalProperties: false,
  oneOf: [
    { required: ['result'], not: { anyOf: [{ required: ['retryIn'] }, { required: ['final'] }] } },
    { required: ['error'], not: { required: ['retryIn', 'final'] } },
  ],
} as const;

/** JSON schema of a claim request (`POST /<queue>/claim`); the body may also be empty. */
export const CLAIM_REQUEST_SCHEMA = {
  type: 'object',
  properties: {
    worker: { type: 'string', minLength: 1, maxLength: 200 },
    criteria: { type: 'object' },
    wait: { type: 'integer', minimum: 0, maximum: 30 },
    max: { type: 'integer', minimum: 1, maximum: MAX_CLAIM },
    done: { type: 'array', maxItems: MAX_DONE, items: DONE_ENTRY_SCHEMA },
  },
} as const;

/** One hand-in of a claim request: the result or the error of an item claimed earlier. */
export type DoneEntry = { id: string; result: Record<string, unknown>; error?: undefined; retryIn?: undefined; final?: undefined } | { id: string; error: Record<string, unknown>; result?: undefined; retryIn?: number; final?: boolean };

/** The TypeScript type of one property schema above (only the types those schemas use). */
type PropertyType<S> = S extends { type: 'string' } ? string : S extends { type: 'integer' } ? number : S extends { type: 'object' } ? Record<string, unknown> : S extends { type: 'array'; items: typeof DONE_ENTRY_SCHEMA } ? DoneEntry[] : never;

/** An object schema's properties, none of them required. */
type FromObjectSchema<S extends { properties: object }> = { -readonly [K in keyof S['properties']]?: PropertyType<S['properties'][K]> };

/**
 * A claim request: the worker's name, the criteria an item must match (interface §4.3), how many
 * seconds to long-poll (0–30), and (decisions §3.8) how many items at most, and the hand-ins to
 * apply first.
 */
export type ClaimRequest = FromObjectSchema<typeof CLAIM_REQUEST_SCHEMA>;

/** The answer to a claim: nothing to do, or the item, leased to the worker until `lease.until` (ms). */
export type ClaimAnswer = (
  | { ok: true; empty: true; done?: DoneAnswer[] }
  | { ok: true; empty?: undefined; id: string; item: Record<string, unknown>; itemText?: string; attempts: number; lease: { worker: string; until: number }; done?: DoneAnswer[] }
) &
  ServerClock &
  RetryAfter;

/**
 * Filled in by the client library from an empty claim answer's `Retry-After` header (decisions
 * §8.5): the queue's rate limit held the claim back, and the next claim can succeed this many ms
 * from now (the header's whole seconds). Absent when the answer has none.
 */
export interface RetryAfter {
  retryAfterMs?: number;
}

/**
 * Filled in by the client library from the answer's `Date` header: how far the server's clock is
 * ahead of this machine's, in ms, when that is more than the header's one-second resolution can
 * blur (0 otherwise). A lease's `until` is on the server's clock.
 */
export interface ServerClock {
  clockOffsetMs?: number;
}

/** A claimed item as a claim with `max` lists it. */
export interface ClaimedItem {
  id: string;
  item: Record<string, unknown>;
  /**
   * The item's exact JSON text as posted (interface §2.1: a worker receives it unchanged). Filled
   * in by the client library from the answer's bytes: `item` is what JSON.parse makes of them,
   * which rounds integers past 2^53 and writes `1.0` or `1e2` back differently.
   */
  itemText?: string;
  attempts: number;
  lease: { worker: string; until: number };
}

/** What became of one hand-in (decisions §3.8 `done`). */
export type DoneAnswer = { id: string; ok: true; accepted: boolean; status: string } | { id: string; ok: false; error: string };

/** The answer to a claim with `max`: up to `max` items, oldest first (`done` when hand-ins were sent). */
export interface ClaimManyAnswer extends ServerClock, RetryAfter {
  ok: true;
  items: ClaimedItem[];
  done?: DoneAnswer[];
}

/** One entry of a batch post's answer, in the order of the items sent. */
export type BatchEntryAnswer = { ok: true; id: string; status: string } | { ok: false; errors: Array<{ path: string; message: string }> };

/** The answer to a batch post (`POST /<queue>/batch`). */
export interface BatchAnswer {
  ok: true;
  items: BatchEntryAnswer[];
}

/** The answer to a post (`POST /<queue>`): the item's id and status (an earlier item's, for a repeated idempotency key). */
export interface PostAnswer {
  ok: true;
  id: string;
  status: string;
}

/** The answer to a progress, result, error or cancel: `accepted` false when the item was already terminal. */
export interface SubmissionAnswer {
  ok: true;
  accepted: boolean;
  status: string;
}

/** An item's status record (`GET /<queue>/items/<id>`); the bodies are the JSON that was posted, or null. */
export interface StatusAnswer {
  ok: true;
  id: string;
  status: string;
  postedBy: string;
  postedAt: number;
  updatedAt: number;
  finishedAt: number | null;
  attempts: number;
  /** decisions §8.1: the item's priority (0 unless posted with one) and group (null without). */
  priority: number;
  group: string | null;
  /** decisions §8.1: for a pending item not claimable before a later time (a delay, a retry delay), that time in ms; else null. */
  runAt: number | null;
  progress: unknown;
  result: unknown;
  error: unknown;
}
