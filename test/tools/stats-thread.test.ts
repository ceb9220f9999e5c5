import { expect } from 'chai';
import { threadId } from 'node:worker_threads';
import { StatsThread } from '../../src/tools/stats.js';

describe('stats probes on a thread of their own (decisions §5: sampling never stalls the requests)', () => {
  it('takes a snapshot with every metric on another thread than the caller (systeminformation runs shell commands synchronously)', async () => {
    const stats = new StatsThread();
    try {
      const snapshot = await stats.snapshot();
      expect(stats.threadId).to.be.a('number').and.not.equal(threadId);
      expect(snapshot.cpu?.cores).to.be.an('array').with.length.above(0);
      expect(snapshot.memory?.total).to.be.above(0);
      expect(snapshot.disk?.total).to.be.above(0);
      // This machine reports disk I/O; the thread's answer carries what systeminformation read.
      expect(snapshot.diskIo).to.have.keys(['readBytes', 'writeBytes']);
      const again = await stats.snapshot();
      expect(again.ts).to.be.at.least(snapshot.ts);
    } finally {
      await stats.close();
    }
  });

  it('answers without the thread when it does not answer in time, with I/O null, and replaces it', async () => {
    // 1 ms: no thread starts and probes in that time.
    const stats = new StatsThread(1);
    try {
      const snapshot = await stats.snapshot();
      expect(snapshot.diskIo).to.equal(null);
      expect(snapshot.netIo).to.equal(null);
      expect(snapshot.cpu?.cores).to.be.an('array').with.length.above(0);
      expect(snapshot.memory?.total).to.be.above(0);
      expect(stats.threadId, 'the thread that did not answer is gone').to.equal(undefined);
    } finally {
      await stats.close();
    }
  });

  it('answers after close without starting a thread', async () => {
    const stats = new StatsThread();
    await stats.close();
    const snapshot = await stats.snapshot();
    expect(snapshot.cpu).to.not.equal(null);
    expect(stats.threadId).to.equal(undefined);
  });
});
