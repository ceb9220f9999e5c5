import { expect } from 'chai';
import fc from 'fast-check';
import { DeadlineHeap } from '../../src/engine/deadline-heap.js';

describe('the deadline heap under the time-driven rules (decisions §3.2)', () => {
  it('pops what is due earliest first, and of equal deadlines the first pushed, through pushes, pops and retains in any order, as a sorted list does (fast-check)', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('push' as const), at: fc.integer({ min: 0, max: 50 }), value: fc.integer({ min: 0, max: 20 }) }),
      fc.record({ kind: fc.constant('pop' as const), now: fc.integer({ min: 0, max: 50 }) }),
      fc.record({ kind: fc.constant('retain' as const), drop: fc.integer({ min: 0, max: 20 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const heap = new DeadlineHeap<number>();
        let model: Array<[number, number]> = [];
        for (const o of ops) {
          if (o.kind === 'push') {
            heap.push(o.at, o.value);
            model.push([o.at, o.value]);
          } else if (o.kind === 'retain') {
            // Drops every entry of one value, as a queue drops those of a removed item.
            heap.retain((v) => v !== o.drop);
            model = model.filter(([, v]) => v !== o.drop);
          } else {
            const got = heap.popDue(o.now);
            const earliest = model.reduce((m, e) => Math.min(m, e[0]), Infinity);
            if (earliest > o.now) expect(got).to.equal(undefined);
            else {
              // Of several entries with the same deadline, the first pushed (the model keeps push order).
              const i = model.findIndex(([at]) => at === earliest);
              expect(got, `popped at ${o.now}`).to.equal(model[i]![1]);
              model.splice(i, 1);
            }
          }
          expect(heap.size).to.equal(model.length);
          expect(heap.peek()).to.equal(model.length ? Math.min(...model.map((e) => e[0])) : undefined);
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('with a tie-break of its own, entries of equal deadlines come out in its order, whatever the order they were pushed in (claim order)', () => {
    const heap = new DeadlineHeap<{ ord: number }>((v) => v.ord);
    const items = [5, 3, 9, 1, 7].map((ord) => ({ ord }));
    for (const item of items) heap.push(100, item);
    heap.push(50, { ord: 8 });
    expect(heap.peekTie()).to.equal(8);
    const out: number[] = [];
    for (let v = heap.popDue(100); v; v = heap.popDue(100)) out.push(v.ord);
    expect(out).to.deep.equal([8, 1, 3, 5, 7, 9]);
  });
});
