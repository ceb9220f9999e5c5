import type { Operation, QueueDefinition } from '../definitions/schemas.js';
import { resolveSchedule, type ScheduleSpec } from './schedules.js';

/** A queue's rules with every default of decisions §2.2 applied. */
export interface QueueConfig {
  leaseMs: number;
  maxAttempts: number;
  retryDelayMs: number;
  /** decisions §8.2: how the retry delay grows with the attempts. */
  retryBackoff: 'fixed' | 'exponential';
  /** decisions §8.2: the longest delay exponential backoff reaches. */
  retryDelayMaxMs: number;
  /** decisions §8.2: each delay is shortened by a random fraction of at most this (0–1) of itself. */
  retryJitter: number;
  timeoutMs: number | null;
  retainFrom: 'finished' | 'fetched';
  retainMs: number;
  archivePayloads: boolean;
  /** decisions §8.3: the queue's schedules, by name; empty when it has none. */
  schedules: readonly ScheduleSpec[];
  /** decisions §8.5: at most this many items leased at once; null: no limit. */
  maxActive: number | null;
  /** decisions §8.5: at most this many leased items per group (items without a group form one group); null: no limit. */
  groupMaxActive: number | null;
  /** decisions §8.5: at most `max` items leased in any window of `windowMs`; null: no limit. */
  rateLimit: { max: number; windowMs: number } | null;
  /** decisions §8.5: `groups`, claims take turns among groups; `fifo`, claim order alone. */
  fairness: 'fifo' | 'groups';
  /** decisions §8.6: the queue of the same host that failed and timed-out items are copied to; null: none. */
  deadLetter: string | null;
  /** decisions §9.1: the target the server POSTs each item to; null: a queue for workers alone. */
  push: PushConfig | null;
  /** decisions §9.2: where an item's status record is POSTed when it ends, unless it names its own; null: nowhere. */
  callback: string | null;
}

/** decisions §9.1 with its defaults applied. */
export interface PushConfig {
  url: string;
  timeoutMs: number;
  /** Deliveries at once, per node. */
  concurrency: number;
  headers: Readonly<Record<string, string>>;
  /** Signs each delivery and callback (HMAC-SHA256); null: unsigned. */
  secret: string | null;
}

/**
 * Who may do what on a queue: `"public"`, or the set of user names listed. A set, not the list as
 * written: deciding costs the same however many users are listed, so that a caller the list leaves
 * out is answered as soon as one whose queue does not exist (decisions §4).
 */
export type AccessPolicy = Partial<Record<Operation, 'public' | ReadonlySet<string>>>;

/** A queue definition's `access` as an {@link AccessPolicy}. */
export function accessPolicy(access: QueueDefinition['access']): AccessPolicy {
  const policy: AccessPolicy = {};
  for (const op of ['post', 'fetch', 'work'] as const) {
    const rule = access?.[op];
    if (rule !== undefined) policy[op] = rule === 'public' ? 'public' : new Set(rule);
  }
  return policy;
}

export function resolveQueue(def: QueueDefinition): QueueConfig {
  const push: PushConfig | null = def.push
    ? { url: def.push.url, timeoutMs: (def.push.timeoutSeconds ?? 30) * 1000, concurrency: def.push.concurrency ?? 10, headers: def.push.headers ?? {}, secret: def.push.secret ?? null }
    : null;
  const leaseSeconds = def.leaseSeconds ?? 60;
  return {
    // decisions §9.1: a push queue's lease outlasts its delivery's timeout by at least 5 s.
    leaseMs: (push ? Math.max(leaseSeconds, push.timeoutMs / 1000 + 5) : leaseSeconds) * 1000,
    maxAttempts: def.maxAttempts ?? 3,
    retryDelayMs: (def.retryDelaySeconds ?? 0) * 1000,
    retryBackoff: def.retryBackoff ?? 'fixed',
    retryDelayMaxMs: (def.retryDelayMaxSeconds ?? 86400) * 1000,
    retryJitter: def.retryJitter ?? 0,
    timeoutMs: def.timeoutSeconds == null ? null : def.timeoutSeconds * 1000,
    retainFrom: def.retainFrom ?? 'finished',
    retainMs: (def.retainSeconds ?? 604800) * 1000,
    archivePayloads: def['svc-queue-archivePayloads'] ?? false,
    schedules: Object.entries(def.schedules ?? {}).map(([name, s]) => resolveSchedule(name, s)),
    maxActive: def.maxActive ?? null,
    groupMaxActive: def.groupMaxActive ?? null,
    rateLimit: def.rateLimit ? { max: def.rateLimit.max, windowMs: def.rateLimit.perSeconds * 1000 } : null,
    fairness: def.fairness ?? 'fifo',
    deadLetter: def.deadLetter ?? null,
    push,
    callback: def.callback ?? null,
  };
}

/**
 * Access decision (interface §5, decisions §2.2 `access`): `user` is the name the caller's token
 * belongs to on this host, or null when no token was sent. An operation not listed is allowed to
 * nobody. A present but unknown token never reaches here: it is the wall already.
 */
export function allows(policy: AccessPolicy, op: Operation, user: string | null): boolean {
  const rule = policy[op];
  if (rule === undefined) return false;
  if (rule === 'public') return true;
  return user !== null && rule.has(user);
}
