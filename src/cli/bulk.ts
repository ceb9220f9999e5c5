import cliProgress from 'cli-progress';
import type { SvcqClient } from '../client/client.js';
import { queuePath, type BulkAnswer, type QueueDetail } from '../operators/answers.js';
import { BULK_COUNT_FIELD, BULK_STATUSES, type BulkKind } from '../operators/bulk.js';
import { UserError } from './base-command.js';
import { onQueue, type QueueTarget } from './queue-arg.js';

/** The most items one request of `svcq redrive`, `svcq retry` and `svcq cancel --all` asks for (the server's batch). */
export const BULK_REQUEST_MAX = 1000;

/** What a bulk command did in all: the items it changed, and whether more are left (it stopped at --max or on a signal). */
export interface BulkTotals {
  kind: BulkKind;
  queue: string;
  changed: number;
  more: boolean;
  /** Statuses acted on (retry, cancel); [] for redrive. */
  statuses: string[];
  /** Requests made. */
  requests: number;
  /** Stopped by Ctrl-C (or SIGTERM) before it was done. */
  interrupted: boolean;
}

/** Where a bulk command reports progress as it goes. */
export interface BulkProgress {
  /** Before the first request: about how many items it will change (an upper bound from the queue's counts), or null when unknown. */
  start(expected: number | null): void;
  /** After each request: the items changed so far. */
  update(totals: BulkTotals): void;
  stop(): void;
}

/**
 * `--status a,b` as the statuses of a retry or a cancel: each among those the action takes, or a
 * usage error naming the flag. Undefined gives the action's default.
 */
export function bulkStatuses(kind: 'retry' | 'cancel', flag: string | undefined): string[] {
  const rule = BULK_STATUSES[kind];
  if (flag === undefined) return [...rule.default];
  const listed = flag.split(',').map((s) => s.trim()).filter((s) => s !== '');
  const bad = listed.find((s) => !(rule.allowed as readonly string[]).includes(s));
  if (listed.length === 0 || bad !== undefined) throw new UserError(`--status must list statuses among ${rule.allowed.join(', ')} (comma-separated)${bad !== undefined ? `: "${bad}" is not one` : ''}`);
  return [...new Set(listed)];
}

/**
 * Runs a bulk action (decisions §8.6) through requests of at most {@link BULK_REQUEST_MAX} items,
 * until `max` items changed (none: all), the server says none are left, a request changed
 * nothing, or `signal` is aborted (the request under way finishes). The queue's counts, read
 * first, give the progress its expected total.
 */
export async function runBulkCommand(client: SvcqClient, target: QueueTarget, kind: BulkKind, options: { statuses: string[]; max?: number; progress?: BulkProgress; signal?: AbortSignal }): Promise<BulkTotals> {
  const queue = `${target.host}/${target.name}`;
  const totals: BulkTotals = { kind, queue, changed: 0, more: false, statuses: kind === 'redrive' ? [] : options.statuses, requests: 0, interrupted: false };
  const detail = await onQueue(target, () => client.json<QueueDetail>('GET', queuePath(target.host, target.name), { shape: 'queueDetail' }));
  const counted = kind === 'redrive' ? detail.counts.pending : options.statuses.reduce((n, s) => n + (detail.counts[s as keyof QueueDetail['counts']] ?? 0), 0);
  options.progress?.start(options.max === undefined ? counted : Math.min(counted, options.max));
  try {
    for (;;) {
      const left = options.max === undefined ? BULK_REQUEST_MAX : Math.min(BULK_REQUEST_MAX, options.max - totals.changed);
      if (left <= 0) break;
      if (options.signal?.aborted) {
        totals.interrupted = true;
        break;
      }
      const { host, name } = target;
      const body = { max: left, status: options.statuses };
      const answer = await onQueue<BulkAnswer>(target, () => (kind === 'redrive' ? client.bulk(host, name, kind, { max: left }) : kind === 'retry' ? client.bulk(host, name, kind, body) : client.bulk(host, name, kind, body)));
      const changed = (answer as Record<string, number | boolean>)[BULK_COUNT_FIELD[kind]] as number;
      totals.requests++;
      totals.changed += changed;
      totals.more = answer.more;
      options.progress?.update(totals);
      if (!totals.more || changed === 0) break;
    }
  } finally {
    options.progress?.stop();
  }
  return totals;
}

/** The line a bulk command ends with. */
export function bulkSummary(t: BulkTotals): string {
  const items = (n: number, what = 'item'): string => `${n} ${what}${n === 1 ? '' : 's'}`;
  const of = t.statuses.length > 0 ? ` (${t.statuses.join(', ')})` : '';
  const head =
    t.kind === 'redrive'
      ? `${t.queue}: ${items(t.changed, 'dead letter')} moved back to the queues they came from`
      : t.kind === 'retry'
        ? `${t.queue}: ${items(t.changed)}${of} pending again`
        : `${t.queue}: ${items(t.changed)}${of} cancelled`;
  if (t.interrupted) return `${head}; stopped before the end, more may be left`;
  return t.more ? `${head}; more are left (run it again, or raise --max)` : head;
}

/** What one batch line says when the output is not a terminal. */
export function bulkBatchLine(t: BulkTotals): string {
  const verb = t.kind === 'redrive' ? 'moved' : t.kind === 'retry' ? 'retried' : 'cancelled';
  return `${t.queue}: ${t.changed} ${verb} so far${t.more ? ', more left' : ''}`;
}

/**
 * Progress on stderr: a bar on a terminal (redrawn in place), else one line per request; nothing
 * with --json (its output is the answer alone).
 */
export function bulkProgress(json: boolean, stream: NodeJS.WriteStream = process.stderr): BulkProgress | undefined {
  if (json) return undefined;
  if (!stream.isTTY) {
    return {
      start: () => undefined,
      update: (t) => void stream.write(`${bulkBatchLine(t)}\n`),
      stop: () => undefined,
    };
  }
  const bar = new cliProgress.SingleBar({ format: '{queue} [{bar}] {value}/{total}', stream, hideCursor: true, clearOnComplete: true }, cliProgress.Presets.shades_classic);
  let started = false;
  return {
    start: (expected) => {
      bar.start(Math.max(1, expected ?? 1), 0, { queue: '' });
      started = true;
    },
    update: (t) => {
      // The counts read first are an estimate: items posted or changed meanwhile may pass them.
      if (t.changed > bar.getTotal()) bar.setTotal(t.changed);
      bar.update(t.changed, { queue: t.queue });
    },
    stop: () => {
      if (started) bar.stop();
    },
  };
}
