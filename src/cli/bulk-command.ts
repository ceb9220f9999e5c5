import { Flags } from '@oclif/core';
import type { SvcqClient } from '../client/client.js';
import type { BulkKind } from '../operators/bulk.js';
import { bulkProgress, bulkSummary, runBulkCommand, type BulkTotals } from './bulk.js';
import type { QueueTarget } from './queue-arg.js';

/** `--max` of the bulk commands. */
export const bulkMaxFlag = Flags.integer({ description: 'change at most this many items (default: all there are)', min: 1 });

/** What a bulk command prints with --json: the totals, named as the endpoint names them. */
export function bulkJson(t: BulkTotals): Record<string, unknown> {
  const field = t.kind === 'redrive' ? 'moved' : t.kind === 'retry' ? 'retried' : 'cancelled';
  return { queue: t.queue, [field]: t.changed, more: t.more, ...(t.statuses.length > 0 ? { status: t.statuses } : {}), requests: t.requests, interrupted: t.interrupted };
}

/**
 * What `svcq redrive`, `svcq retry` and `svcq cancel --all` share: the run with its progress, and
 * Ctrl-C (or SIGTERM) ending it after the request under way, with the totals so far.
 */
export async function bulkCommand(client: SvcqClient, target: QueueTarget, kind: BulkKind, options: { statuses: string[]; max?: number; json: boolean; log: (line: string) => void }): Promise<Record<string, unknown>> {
  const interrupt = new AbortController();
  const onSignal = (): void => interrupt.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let totals: BulkTotals;
  try {
    totals = await runBulkCommand(client, target, kind, { statuses: options.statuses, max: options.max, progress: bulkProgress(options.json), signal: interrupt.signal });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (!options.json) options.log(bulkSummary(totals));
  return bulkJson(totals);
}
