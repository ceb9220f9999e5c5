import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { defineQueue, killWorker, postItem, queueName, startWorker, waitTerminal, type WorkerProcess } from './support.js';

/** A server that answers every claim `{ ok: true, empty: true }` at once, as one shutting down does, and counts them. */
async function emptyServer(): Promise<{ url: string; claims: () => number; close: () => Promise<void> }> {
  let claims = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'POST' && req.url?.endsWith('/claim')) claims++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"empty":true}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    claims: () => claims,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('svcq work: claiming (decisions §1.3, §3.3)', function () {
  this.timeout(30_000);
  let worker: WorkerProcess | undefined;

  afterEach(async () => {
    await killWorker(worker);
    worker = undefined;
  });

  for (const wait of ['1', '0']) {
    it(`never claims in a tight loop: empty answers that come back at once (--wait ${wait}) are followed by growing pauses`, async () => {
      const fake = await emptyServer();
      try {
        worker = startWorker(fake, 'spin', ['--exec', 'true', '--wait', wait]);
        await sleep(2000);
        // Pauses of about 0.1, 0.2, 0.4, 0.8 and 1.6 s fit about five claims into two seconds.
        expect(fake.claims()).to.be.within(2, 10);
        worker.proc.kill('SIGTERM');
        // A pause ends at the signal: the worker does not sit out its backoff.
        const started = Date.now();
        expect(await worker.exited).to.equal(0);
        expect(Date.now() - started).to.be.below(1500);
      } finally {
        await fake.close();
      }
    });
  }

  it('with --once, empty answers that come back at once are asked again with pauses until --wait has passed, then exit 3 (decisions §7)', async () => {
    const fake = await emptyServer();
    try {
      const started = Date.now();
      worker = startWorker(fake, 'spin', ['--exec', 'true', '--wait', '2', '--once']);
      expect(await worker.exited).to.equal(3);
      expect(Date.now() - started).to.be.within(2000, 6000);
      expect(fake.claims()).to.be.within(2, 10);
    } finally {
      await fake.close();
    }
  });

  describe('against a real server', () => {
    let server: TestServer;
    before(async () => {
      server = await startServer();
    });
    after(async () => {
      await server.stop();
      cleanupTemp(server.root);
    });

    it('with --wait 0 polls instead of long-polling, and picks up an item posted while it waits', async () => {
      const queue = queueName('poll');
      await defineQueue(server, queue);
      worker = startWorker(server, queue, ['--exec', 'echo polled', '--wait', '0']);
      await worker.waitEvent((e) => e.event === 'started', 'the start');
      await sleep(1000);
      const id = await postItem(server, queue, {});
      const item = await waitTerminal(server, queue, id, 10);
      expect(item.result).to.deep.equal({ output: 'polled' });
    });

    it('with --once and --wait 0 exits 3 at once when the queue is empty (decisions §7)', async () => {
      const queue = queueName('once0');
      await defineQueue(server, queue);
      worker = startWorker(server, queue, ['--exec', 'true', '--wait', '0', '--once']);
      const started = Date.now();
      expect(await worker.exited).to.equal(3);
      expect(Date.now() - started).to.be.below(5000);
    });
  });
});
