import type { DefinitionRegistry } from '../definitions/registry.js';
import type { Operators } from '../operators/operators.js';
import type { Store } from '../store/store.js';
import type { AccessLogSink } from '../tools/access-log.js';
import type { Snapshot } from '../tools/stats.js';
import type { LongPolls } from '../waiting/long-poll.js';

/** Everything a request handler may use. Built by `startServer`, or by a test for `createApp`. */import type { PushAllowList } from '../push/allow-list.js';

export interface ServerContext {
  root: string;
  masterToken: string;
  registry: DefinitionRegistry;
  store: Store;
  /** Claims and fetches that wait (long polls), above the store. */
  waits: LongPolls;
  accessLog: AccessLogSink;
  /** Milliseconds between stats samples, as `GET /api/v2/stats` reports it (default 15000). */
  statsInterval?: number;
  /** A live snapshot of the host for `GET /api/v2/stats/now` (default: taken on the calling thread). */
  snapshot?: () => Promise<Snapshot>;
  /** Largest request body accepted, in bytes (decisions §3.5, `--max-body`). */
  maxBody: number;
  /** The task history; its readers flush it first, so that they see every acknowledged event. */
  taskHistory?: { flush(): Promise<void> };
  /**
   * Where archived payloads are read when the store keeps them itself (PostgreSQL, shared by every
   * node); absent: the files under the root (the embedded store's archive).
   */
  payloads?: { read(host: string, queue: string, id: string, kind: 'item' | 'progress' | 'result' | 'error'): Promise<Buffer | null> };
  /** Aborted when the server begins to stop: long polls answer at once. */
  stopping: AbortSignal;
  /** What operators see (decisions §5.1): queue overviews, rates and metrics. */
  operators: Operators;
  /** decisions §9: the URLs this server may call (`--push-allow`); a post's `?callback` outside them is a 400. */
  pushAllow: PushAllowList;
}
