import { expect } from 'chai';
import { faultProxy } from '../support/fault-proxy.js';
import { serverForSuite } from '../support/server.js';
import { defineQueue, getItem, killWorker, postItem, queueName, startWorker, waitTerminal, type WorkerProcess } from './support.js';

describe('svcq work passes a failing command\'s wish on: `::retry-in N`, `::final` (decisions §8.2)', function () {
  this.timeout(60_000);
  const server = serverForSuite();
  let worker: WorkerProcess | undefined;
  afterEach(async () => {
    await killWorker(worker);
    worker = undefined;
  });

  for (const [line, query] of [
    ['::retry-in 30', '?retryIn=30'],
    ['::final', '?final=true'],
  ] as const) {
    it(`a failing command that prints "${line}" sends its error with ${query}`, async () => {
      const queue = queueName('wish');
      await defineQueue(server, queue, { maxAttempts: 3 });
      const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/items/[0-9a-f]{16}/error\\${query} `));
      try {
        await postItem(server, queue, { n: 1 });
        worker = startWorker({ url: proxy.url }, queue, ['--exec', `echo "${line}"; exit 4`, '--once']);
        expect(await worker.exited, worker.stderr()).to.equal(1);
        expect(proxy.matched).to.equal(1);
      } finally {
        proxy.close();
      }
    });
  }

  it('a command that succeeds after printing "::final" finishes its item: the wish is for a failure only', async () => {
    const queue = queueName('wish');
    await defineQueue(server, queue, { maxAttempts: 3 });
    const id = await postItem(server, queue, { n: 1 });
    worker = startWorker(server, queue, ['--exec', 'echo ::final; echo \'{"fine":true}\'', '--once']);
    expect(await worker.exited, worker.stderr()).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('finished');
    expect(item.result).to.deep.equal({ fine: true });
  });

  it('"::final" fails the item at once, attempts left or not, handed in with the next claim or on its own', async () => {
    for (const handIn of ['--hand-in', '--no-hand-in']) {
      const queue = queueName('wish');
      await defineQueue(server, queue, { maxAttempts: 5 });
      const id = await postItem(server, queue, { n: 1 });
      worker = startWorker(server, queue, ['--exec', 'echo ::final; exit 1', handIn]);
      const item = await waitTerminal(server, queue, id);
      expect(item.status, handIn).to.equal('failed');
      expect(item.attempts, handIn).to.equal(1);
      await killWorker(worker);
    }
  });

  it('"::retry-in N" puts the next attempt N seconds off, handed in with the next claim or on its own', async () => {
    for (const handIn of ['--hand-in', '--no-hand-in']) {
      const queue = queueName('wish');
      await defineQueue(server, queue, { maxAttempts: 5 });
      const id = await postItem(server, queue, { n: 1 });
      worker = startWorker(server, queue, ['--exec', 'echo "::retry-in 3600"; exit 1', handIn]);
      await worker.waitEvent((e) => e.event === 'failed' && e.id === id, 'the error delivered');
      const item = (await getItem(server, queue, id)) as unknown as { status: string; attempts: number; runAt: number };
      expect(item.status, handIn).to.equal('pending');
      expect(item.runAt, handIn).to.be.above(Date.now() + 3500_000);
      await killWorker(worker);
    }
  });

  it('a stop releases the items claimed ahead that were not started: pending again at once, attempts not counted', async () => {
    const queue = queueName('wish');
    await defineQueue(server, queue, { leaseSeconds: 300 });
    const ids = [await postItem(server, queue, { n: 0, s: 0 })];
    for (let n = 1; n <= 4; n++) ids.push(await postItem(server, queue, { n, s: 1 }));
    worker = startWorker(server, queue, ['--exec', 'item=$(cat); case "$item" in *\'"s":0\'*) ;; *) sleep 1 ;; esac; echo "$item"', '--prefetch', '5']);
    await worker.waitEvent((e) => e.event === 'claimed' && e.id === ids[1], 'the second item started');
    worker.proc.kill('SIGINT');
    expect(await worker.exited).to.equal(0);
    const released = worker.events.filter((e) => e.event === 'released').map((e) => e.id);
    expect(released).to.have.length.above(0);
    for (const id of released) expect(await getItem(server, queue, id!)).to.include({ status: 'pending', attempts: 0 });
  });
});

