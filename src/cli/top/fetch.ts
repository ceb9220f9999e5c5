import type { CallOptions, SvcqClient } from '../../client/client.js';
import { QUEUES_PATH, queuePath, type QueueDetail, type QueueEntry, type QueueList } from '../../operators/answers.js';
import type { Snapshot } from '../../tools/stats.js';
import { clockOffset, keyOf, selectedAfter, type Fetched } from './model.js';

/**
 * One refresh: the list and the server's health together, then the selected queue's detail (when
 * the selection is gone, that of the queue now in its place in `shown`, the list on the screen;
 * none with `detail: false`). A failure of the list is the refresh's failure; health
 * that cannot be read is shown as unknown, and a queue deleted meanwhile simply has no detail.
 * `signal` abandons the requests still waiting for their answer (the view has ended).
 */
export async function fetchTop(client: SvcqClient, selected: string | null, options: { detail?: boolean; shown?: readonly QueueEntry[]; now?: () => number; signal?: AbortSignal } = {}): Promise<Fetched> {
  const call = { timeoutMs: 10_000, signal: options.signal };
  const now = options.now ?? Date.now;
  const sentAt = now();
  let answeredAt = sentAt;
  const [list, health] = await Promise.all([
    fetchQueueList(client, call),
    client.tool<Snapshot>('stats/now', call).then(
      (h) => ((answeredAt = now()), h),
      () => null,
    ),
  ]);
  const key = options.detail === false ? null : selectedAfter(selected, list.queues, options.shown);
  const entry = key === null ? undefined : list.queues.find((q) => keyOf(q) === key);
  const detail = entry ? await client.json<QueueDetail>('GET', queuePath(entry.host, entry.name), { shape: 'queueDetail', ...call }).catch(() => null) : null;
  return { at: now(), list, detail, health, clockOffsetMs: health && typeof health.ts === 'number' ? clockOffset(health.ts, sentAt, answeredAt) : null };
}

/** GET /api/v2/queues, refused in one sentence when what answered is not svcq (a --url that names some other web server may well answer 200, with a page). */
export function fetchQueueList(client: SvcqClient, call: CallOptions = {}): Promise<QueueList> {
  return client.json<QueueList>('GET', QUEUES_PATH, { shape: 'queueList', ...call });
}
