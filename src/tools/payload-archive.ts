import path from 'node:path';
import type { PayloadKind, StagedPayload } from '../store/store.js';
import { stageFile } from '../durable-files.js';

/** `<dir>/<host>/<queue>/<id>.<kind>`: callers pass only validated host, queue, id and kind. */
export function payloadFile(dir: string, host: string, queue: string, id: string, kind: PayloadKind): string {
  return path.join(dir, host, queue, `${id}.${kind}`);
}

/**
 * Archived payloads (decisions §5): the exact bytes of an item, its latest accepted progress, its
 * result and its latest error, one file each under `<root>/_svcq/payloads/<host>/<queue>/<id>.<kind>`,
 * written before the reply that accepted them. They survive retention.
 *
 * A payload is staged first (written and synced under a temporary name beside its place) and
 * published by a rename only once the store has made its change durable, so that a change that
 * could not be written leaves no payload behind.
 */
export class PayloadArchive {
  constructor(readonly dir: string) {}

  fileFor(host: string, queue: string, id: string, kind: PayloadKind): string {
    return payloadFile(this.dir, host, queue, id, kind);
  }

  stage(host: string, queue: string, id: string, kind: PayloadKind, body: string): Promise<StagedPayload> {
    return stageFile(this.fileFor(host, queue, id, kind), body);
  }
}
