/**
 * What a claim with criteria costs the server thread when nothing waiting matches: the engine
 * alone (no HTTP, no store), N items waiting, the same criteria claimed again and again as a fleet
 * of workers sharing one `--criteria` would, with a few new items posted between claims; and the
 * first walk again cut into the steps the store runs it in, with other requests between them.
 *
 *   node --import tsx bench/criteria.ts [items=1000000]
 */
import { resolveQueue } from '../src/engine/config.js';
import { Queue } from '../src/engine/queue.js';
import { CLAIM_STEP } from '../src/store/embedded-store.js';
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

// As the store runs it, in steps with other requests between them: other criteria, a fresh walk.
const stepped = { kind: 'audio' };
const steps: number[] = [];
let step: ReturnType<Queue['claimStep']> = null;
do {
  const t0 = performance.now();
  step = queue.claimStep('w', stepped, Date.now(), CLAIM_STEP, step);
  steps.push(performance.now() - t0);
} while (step !== null && !('item' in step));
if (step !== null) throw new Error('a claim matched');
console.log(`${count.toLocaleString('en-US')} items waiting, none matching; node ${process.version}`);
console.log(`first claim with the criteria:           ${first.toFixed(1)} ms`);
console.log(`the same walk as the store runs it:       ${steps.length} steps of ${CLAIM_STEP.toLocaleString('en-US')} bodies, longest ${Math.max(...steps).toFixed(1)} ms, ${steps.reduce((a, b) => a + b, 0).toFixed(0)} ms in all`);
console.log(`the same criteria again, 10 posts apart: median ${again[50]!.toFixed(3)} ms, max ${again.at(-1)!.toFixed(3)} ms (100 claims)`);
