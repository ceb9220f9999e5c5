import net, { type AddressInfo } from 'node:net';
import { expect } from 'chai';
import { cleanupTemp, startServer } from '../support/server.js';
import { defineQueue, killWorker, queueName, startWorker, until, type WorkerProcess } from './support.js';

/** A port on which nothing listens (connection refused). */
async function closedPort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

const lines = (text: string): string[] => text.split('\n').filter(Boolean);

describe('svcq work: a server it cannot reach (decisions §1.3)', function () {
  this.timeout(30_000);
  let worker: WorkerProcess | undefined;

  afterEach(async () => {
    await killWorker(worker);
    worker = undefined;
  });

  it('says on stderr, on the first failure, which URL it cannot reach and why, and does not repeat it on every retry', async () => {
    const port = await closedPort();
    const url = `http://127.0.0.1:${port}`;
    worker = startWorker({ url }, 'nowhere', ['--exec', 'true']);
    const w = worker;
    await until(() => w.stderr().length > 0, 'a line on stderr', 5000);
    expect(lines(w.stderr())).to.deep.equal([`cannot reach ${url} (connection refused); retrying`]);
    // Several retries later (0.1, 0.2, 0.4, 0.8 s …) it has still said it once.
    await new Promise((r) => setTimeout(r, 2500));
    expect(w.events.filter((e) => e.event === 'retry').length).to.be.greaterThan(3);
    expect(lines(w.stderr())).to.have.length(1);
    w.proc.kill('SIGTERM');
    expect(await w.exited).to.equal(0);
  });

  it('says on stderr when the server answers again', async () => {
    const first = await startServer();
    const queue = queueName('back');
    try {
      await defineQueue(first, queue);
      expect(await first.stop()).to.equal(0);
      worker = startWorker(first, queue, ['--exec', 'true']);
      const w = worker;
      await until(() => w.stderr().includes('(connection refused); retrying'), 'the first failure', 5000);
      const again = await startServer({ root: first.root, port: first.port, masterToken: first.masterToken });
      try {
        await until(() => /the server answers again, after \d+ s of failures\n/.test(w.stderr()), 'the server answering again', 10_000);
        expect(w.events.some((e) => e.event === 'reconnected')).to.equal(true);
      } finally {
        await killWorker(w);
        await again.stop();
      }
    } finally {
      cleanupTemp(first.root);
    }
  });
  it('a Ctrl-C while it waits to claim again from a server it cannot reach ends it at once, not after the pause (decisions §1.3)', async () => {
    const port = await closedPort();
    worker = startWorker({ url: `http://127.0.0.1:${port}` }, 'nowhere', ['--exec', 'true']);
    const w = worker;
    // The pauses grow (0.1, 0.2, 0.4 … s): wait for one of two seconds or more to begin.
    await w.waitEvent((e) => e.event === 'retry' && Number(e.delayMs) >= 2000, 'a long pause', 15_000);
    const signalled = Date.now();
    w.proc.kill('SIGINT');
    expect(await w.exited).to.equal(0);
    expect(Date.now() - signalled, 'the stop sat out the pause').to.be.below(1500);
  });
});
