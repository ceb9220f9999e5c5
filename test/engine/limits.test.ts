import { expect } from 'chai';
import { RateRing } from '../../src/engine/limits.js';

describe('RateRing: the exact rate window (decisions §8.5)', () => {
  it('lease k may happen at t only if lease k − max happened at or before t − window: at the edge exactly, not a millisecond before', () => {
    const ring = new RateRing(2, 1000);
    expect(ring.room(0)).to.equal(2);
    ring.note(0);
    ring.note(400);
    expect(ring.allows(999)).to.equal(false);
    expect(ring.room(999)).to.equal(0);
    expect(ring.nextAt()).to.equal(1000);
    expect(ring.allows(1000)).to.equal(true);
    expect(ring.room(1000)).to.equal(1);
    expect(ring.room(1400)).to.equal(2);
    ring.note(1000);
    expect(ring.nextAt()).to.equal(1400);
    expect(ring.allows(1399)).to.equal(false);
    expect(ring.allows(1400)).to.equal(true);
  });

  it('never lets more than max through in any window, leases made together counting one each', () => {
    const ring = new RateRing(3, 100);
    const times: number[] = [];
    for (let t = 0; t < 1000; t += 7) {
      for (let k = 0; k < 2 && ring.allows(t); k++) {
        ring.note(t);
        times.push(t);
      }
    }
    for (const start of times) expect(times.filter((t) => t > start - 100 && t <= start).length).to.be.at.most(3);
    expect(times.length).to.be.above(20);
  });

  it('a resize keeps the most recent leases; unnote takes the last one back; recent lists what counts, oldest first', () => {
    const ring = new RateRing(3, 1000);
    const previous = [ring.note(10), ring.note(20), ring.note(30)];
    expect(ring.recent()).to.deep.equal([10, 20, 30]);
    const slot = ring.note(40);
    expect(ring.recent()).to.deep.equal([20, 30, 40]);
    ring.unnote(slot);
    expect(ring.recent()).to.deep.equal([10, 20, 30]);
    expect(previous[0]).to.equal(-Infinity);
    ring.resize(2, 1000);
    expect(ring.recent()).to.deep.equal([20, 30]);
    expect(ring.nextAt()).to.equal(1020);
    ring.resize(4, 500);
    expect(ring.recent()).to.deep.equal([20, 30]);
    expect(ring.room(40)).to.equal(2);
    expect(ring.allows(520)).to.equal(true);
  });
});
