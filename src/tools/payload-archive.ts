import path from 'node:path';
import type { PayloadKind } from '../store/store.js';
import { writeAtomically } from '../definitions/registry.js';

/** `<dir>/<host>/<queue>/<id>.<kind>`: callers pass only validated host, queue, id and kind. */
export function payloadFile(dir: string, host: string, queue: string, id: string, kind: PayloadKind): string {
  return path.join(dir, host, queue, `${id}.${kind}`);
}

/**
 * Archived payloads (decisions §5): the exact bytes of an item, its latest accepted progress, its
 * result and its latest error, one file each under `<root>/_svcq/payloads/<host>/<queue>/<id>.<kind>`,
 * written atomically before the reply that accepted them. They survive retention.
 */
export class PayloadArchive {
  constructor(readonly dir: string) {}

  fileFor(host: string, queue: string, id: string, kind: PayloadKind): string {
    return payloadFile(this.dir, host, queue, id, kind);
  }

  async write(host: string, queue: string, id: string, kind: PayloadKind, body: string): Promise<void> {
    await writeAtomically(this.fileFor(host, queue, id, kind), body);
  }
}
