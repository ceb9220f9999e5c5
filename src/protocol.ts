/**
 * The queue endpoints' requests and answers (interface §4.1–§4.3), in one place for both sides:
 * the server compiles its request validators from the schemas here, and the client's types are
 * these. A request type is derived from its schema, so that the two cannot drift apart.
 */

/** JSON schema of a claim request (`POST /<queue>/claim`); the body may also be empty. */
export const CLAIM_REQUEST_SCHEMA = {
  type: 'object',
  properties: {
    worker: { type: 'string', minLength: 1, maxLength: 200 },
    criteria: { type: 'object' },
    wait: { type: 'integer', minimum: 0, maximum: 30 },
  },
} as const;

/** The TypeScript type of one property schema above (only the types those schemas use). */
type PropertyType<S> = S extends { type: 'string' } ? string : S extends { type: 'integer' } ? number : S extends { type: 'object' } ? Record<string, unknown> : never;

/** An object schema's properties, none of them required. */
type FromObjectSchema<S extends { properties: object }> = { -readonly [K in keyof S['properties']]?: PropertyType<S['properties'][K]> };

/** A claim request: the worker's name, the criteria an item must match (interface §4.3), and how many seconds to long-poll (0–30). */
export type ClaimRequest = FromObjectSchema<typeof CLAIM_REQUEST_SCHEMA>;

/** The answer to a claim: nothing to do, or the item, leased to the worker until `lease.until` (ms). */
export type ClaimAnswer =
  | { ok: true; empty: true }
  | { ok: true; empty?: undefined; id: string; item: Record<string, unknown>; attempts: number; lease: { worker: string; until: number } };

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
  progress: unknown;
  result: unknown;
  error: unknown;
}
