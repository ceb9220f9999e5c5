/**
 * What the embedded store's records cost for a large backlog, on this thread, without a server:
 * building the text of a snapshot of N waiting items (the part of a snapshot that runs on the
 * server thread), and loading the same records back as start-up does.
 *
 *   node --import tsx bench/records.ts [items=1000000] [itemBytes=190]
 *
 * Each figure is the median of three passes. The load passes read a journal file written from
 * the same text into a temp directory (removed afterwards).
 */
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Item } from '../src/engine/queue.js';
import { itemRecord, Journal } from '../src/store/journal.js';
import { makeItem } from './protocol.js';

const count = Number(process.argv[2] ?? 1_000_000);
const itemBytes = Number(process.argv[3] ?? 190);
if (!Number.isInteger(count) || count <= 0 || !Number.isInteger(itemBytes) || itemBytes <= 0) {
  throw new Error('usage: records.ts [items] [itemBytes], both positive integers');
}
const QUEUE = 'bench.test/backlog';
const QUEUE_JSON = JSON.stringify(QUEUE);

const now = Date.now();
const items: Item[] = [];
for (let i = 0; i < count; i++) items.push(new Item((i + 1).toString(16).padStart(16, '0'), i + 1, makeItem(i, itemBytes), 'public', now + Math.floor(i / 16), 'pending'));

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * As the snapshot does: records appended to a chunk that is handed on every 1 MiB; here it is
 * encoded (what the write would do), or written to `fd` when one is given.
 */
function snapshotText(fd?: number): { ms: number; bytes: number } {
  const t0 = performance.now();
  let chunk = '';
  let bytes = 0;
  const handOn = (): void => {
    bytes += fd === undefined ? Buffer.byteLength(chunk) : writeSync(fd, chunk);
    chunk = '';
  };
  for (const item of items) {
    chunk += itemRecord(QUEUE_JSON, item);
    if (chunk.length > 1 << 20) handOn();
  }
  if (chunk) handOn();
  return { ms: performance.now() - t0, bytes };
}

const build = [snapshotText(), snapshotText(), snapshotText()];

const dir = mkdtempSync(path.join(os.tmpdir(), 'svcq-records-'));
try {
  const fd = openSync(path.join(dir, 'journal-0.jsonl'), 'w');
  snapshotText(fd);
  closeSync(fd);
  const load: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const journal = new Journal({ dir, warn: (line) => console.error(`warning: ${line}`) });
    const { items: loaded } = await journal.open();
    load.push(performance.now() - t0);
    await journal.close();
    const n = loaded.get(QUEUE)?.size ?? 0;
    if (n !== count) throw new Error(`loaded ${n} of ${count} items`);
  }
  const times = build.map((b) => b.ms);
const fmt = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;
  console.log(`${count.toLocaleString('en-US')} waiting items of ${itemBytes} bytes, node ${process.version}`);
  console.log(`snapshot text (server thread): ${fmt(median(times))} (passes: ${times.map(fmt).join(', ')}), ${(build[0]!.bytes / 2 ** 20).toFixed(0)} MiB`);
  console.log(`load the same records:         ${fmt(median(load))} (passes: ${load.map(fmt).join(', ')})`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
