import type { ItemStatus } from '../engine/item.js';
import { BULK_BATCH, type BulkAction, type BulkOutcome } from '../store/store.js';

/**
 * Bulk actions (decisions §8.6): what a request may ask, checked before anything changes, and the
 * loop of atomic store batches that carries it out.
 */

export type BulkKind = 'redrive' | 'retry' | 'cancel';

export const BULK_KINDS: readonly BulkKind[] = ['redrive', 'retry', 'cancel'];

/** The most items one request changes (`max`), and how many when it does not say. */
export const BULK_MAX = 100_000;
export const BULK_DEFAULT_MAX = 1000;

/** The statuses each action may take, and those it takes when the request names none. */
export const BULK_STATUSES: Readonly<Record<'retry' | 'cancel', { allowed: readonly ItemStatus[]; default: readonly ItemStatus[] }>> = {
  retry: { allowed: ['failed', 'timedout', 'cancelled'], default: ['failed', 'timedout'] },
  cancel: { allowed: ['pending', 'claimed', 'processing'], default: ['pending'] },
};

/** The answer's field that counts the items changed, by action. */
export const BULK_COUNT_FIELD = { redrive: 'moved', retry: 'retried', cancel: 'cancelled' } as const satisfies Record<BulkKind, string>;

/** A bulk request, checked: how many items at most, and (retry, cancel) which statuses. */
export interface BulkRequest {
  max: number;
  statuses: readonly ItemStatus[];
}

/** A request that cannot be carried out as sent: the sentence names the field. */
export class BulkRefused extends Error {}

/**
 * The request body (JSON text; empty means `{}`) as a {@link BulkRequest}, or {@link BulkRefused}
 * naming the field that is wrong: `{ "max"?: 1–100000 }`, and for retry and cancel `"status"?: [...]`.
 */
export function bulkRequest(kind: BulkKind, text: string): BulkRequest {
  let body: unknown = {};
  if (text.trim() !== '') {
    try {
      body = JSON.parse(text);
    } catch {
      throw new BulkRefused('the request body is not valid JSON');
    }
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new BulkRefused('the request body must be a JSON object');
  const fields = body as Record<string, unknown>;
  const statuses = kind === 'redrive' ? undefined : BULK_STATUSES[kind];
  for (const name of Object.keys(fields)) {
    if (name !== 'max' && (name !== 'status' || !statuses)) throw new BulkRefused(`${name} is not a field of a ${kind}: it takes ${statuses ? 'status and max' : 'max'}`);
  }
  const max = fields.max === undefined ? BULK_DEFAULT_MAX : fields.max;
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > BULK_MAX) throw new BulkRefused(`max must be an integer from 1 to ${BULK_MAX}`);
  if (!statuses) return { max, statuses: [] };
  const listed = fields.status === undefined ? statuses.default : fields.status;
  const rule = `status must be a non-empty array of statuses among ${statuses.allowed.join(', ')}`;
  if (!Array.isArray(listed) || listed.length === 0) throw new BulkRefused(rule);
  for (const s of listed as unknown[]) if (typeof s !== 'string' || !statuses.allowed.includes(s as ItemStatus)) throw new BulkRefused(`${rule} (${typeof s === 'string' ? s : JSON.stringify(s)} is not one)`);
  return { max, statuses: [...new Set(listed as ItemStatus[])] };
}

/**
 * Runs a bulk action in atomic store batches of at most {@link BULK_BATCH} until `max` items are
 * changed, none are left, or a batch changed nothing. `batch` is asked for each batch anew (the
 * queue as it is defined then: undefined once it is gone, which ends the run).
 */
export async function runBulk(max: number, batch: (size: number) => Promise<BulkOutcome> | undefined): Promise<BulkOutcome> {
  let changed = 0;
  let more = false;
  while (changed < max) {
    const out = await batch(Math.min(BULK_BATCH, max - changed));
    if (!out) break;
    changed += out.changed;
    more = out.more;
    if (!more || out.changed === 0) break;
  }
  return { changed, more };
}

/** The store's action for a checked request. */
export function bulkAction(kind: BulkKind, request: BulkRequest, queueNamed: Extract<BulkAction, { kind: 'redrive' }>['queueNamed']): BulkAction {
  return kind === 'redrive' ? { kind, queueNamed } : { kind, statuses: request.statuses };
}
