/**
 * What a claim with criteria costs the server thread when nothing waiting matches: the engine
 * alone (no HTTP, no store), N items waiting, the same criteria claimed again and again as a fleet
 * of workers sharing one `--criteria` would, with a few new items posted between claims.
 *
 *   node --import tsx bench/criteria.ts [items=1000000]
 */
import { resolveQueue } from '../src/engine/config.js';
import { Queue } from '../src/engine/queue.js';
import { makeItem } from './protocol.js';

const count = Number(process.argv[2] ?? 1_000_000);
if (!Number.isInteger(count) || count <= 0) throw new Error('usage: criteria.ts [items], a positive integer');

const queue = new Queue(resolveQueue({}));
let seq = 0;
const post = (): void => {
  queue.post({ id: (++seq).toString(16).padStart(16, '0'), body: makeItem(seq, 190), postedBy: 'public', idempotencyKey: null }, Date.now());
};
for (let i = 0; i < count; i++) post();

// Every item says kind: "thumbnail"; the claims ask for something else.
const criteria = { kind: 'video' };
const claim = (): number => {
  const t0 = performance.now();
  if (queue.claim('w', criteria, Date.now()) !== null) throw new Error('a claim matched');
  return performance.now() - t0;
};

const first = claim();
const again: number[] = [];
for (let i = 0; i < 100; i++) {
  for (let j = 0; j < 10; j++) post();
  again.push(claim());
}
again.sort((a, b) => a - b);
console.log(`${count.toLocaleString('en-US')} items waiting, none matching; node ${process.version}`);
console.log(`first claim with the criteria:           ${first.toFixed(1)} ms`);
console.log(`the same criteria again, 10 posts apart: median ${again[50]!.toFixed(3)} ms, max ${again.at(-1)!.toFixed(3)} ms (100 claims)`);
