import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { ClientError, Final, Release, RetryIn, SvcqClient, type WorkerEvent } from '../../src/client/index.js';
import { defineQueue, PUBLIC_ACCESS, uniqueName } from '../http/queue-api.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';

const HOST = 'jobs.example.com';

/** The events of one `client.work()`, and a way to wait for one. */
function recorder(): { events: WorkerEvent[]; onEvent: (e: WorkerEvent) => void; waitFor: (test: (e: WorkerEvent) => boolean, what: string) => Promise<WorkerEvent> } {
  const events: WorkerEvent[] = [];
  const waiters: Array<{ test: (e: WorkerEvent) => boolean; resolve: (e: WorkerEvent) => void }> = [];
  return {
    events,
    onEvent: (e) => {
      events.push(e);
      for (const w of [...waiters]) {
        if (!w.test(e)) continue;
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    },
    waitFor: (test, what) => {
      const seen = events.find(test);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no event: ${what}; saw ${JSON.stringify(events)}`)), 20_000);
        waiters.push({ test, resolve: (e) => (clearTimeout(timer), resolve(e)) });
      });
    },
  };
}

/** A promise and the function that settles it: what a handler waits on, so that a test decides when it ends. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('client.work(): the library\'s worker loop (decisions §1.3, §3.2, §3.8, §8.2)', function () {
  this.timeout(60_000);
  let server: TestServer;
  let client: SvcqClient;

  before(async () => {
    server = await startServer();
    client = new SvcqClient({ url: server.url, host: HOST });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  async function queue(def: Record<string, unknown> = {}): Promise<string> {
    const name = uniqueName('work');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, ...def });
    return name;
  }

  it('runs the handler for each item, `concurrency` at once, and what it returns is the item\'s result', async () => {
    const q = await queue();
    const ids = (await Promise.all(Array.from({ length: 9 }, (_, n) => client.post(q, { n })))).map((a) => a.id);
    let running = 0;
    let most = 0;
    const rec = recorder();
    const working = client.work<{ n: number }>(
      q,
      async (item, job) => {
        most = Math.max(most, ++running);
        expect(job.attempts).to.equal(1);
        await new Promise((resolve) => setTimeout(resolve, 20));
        running--;
        return { doubled: item.n * 2 };
      },
      { concurrency: 3, onEvent: rec.onEvent },
    );
    for (const [n, id] of ids.entries()) {
      const status = await client.item(q, id, 20);
      expect(status.status).to.equal('finished');
      expect(status.result).to.deep.equal({ doubled: n * 2 });
    }
    expect(most).to.equal(3);
    expect(await working.stop()).to.deep.equal({ done: 9, failed: 0, cancelled: 0 });
  });

  it('a handler that throws fails its item with { name, message }, retried by the queue\'s rule (decisions §3.2, §3.4)', async () => {
    const q = await queue({ maxAttempts: 2 });
    const { id } = await client.post(q, { n: 1 });
    const working = client.work(q, (_item, job) => {
      throw Object.assign(new TypeError(`boom ${job.attempts}`), { details: { at: 'step 2' } });
    });
    const status = await client.item(q, id, 20);
    expect(status.status).to.equal('failed');
    expect(status.attempts).to.equal(2);
    expect(status.error).to.deep.equal({ name: 'TypeError', message: 'boom 2', details: { at: 'step 2' } });
    expect(await working.stop()).to.deep.equal({ done: 0, failed: 2, cancelled: 0 });
  });

  it('a handler that hangs is given up on after timeoutMs: its signal aborts and the item gets a TimeoutError', async () => {
    const q = await queue({ maxAttempts: 1 });
    const { id } = await client.post(q, { n: 1 });
    let aborted: Promise<void> | undefined;
    const working = client.work(
      q,
      (_item, job) => {
        aborted = new Promise((resolve) => job.signal.addEventListener('abort', () => resolve()));
        return new Promise(() => {});
      },
      { timeoutMs: 300 },
    );
    const status = await client.item(q, id, 20);
    expect(status.status).to.equal('failed');
    expect(status.error).to.deep.equal({ name: 'TimeoutError', message: 'timed out after 300 ms' });
    await aborted;
    // The hanging handler holds no slot: the stop does not wait for it.
    expect(await working.stop()).to.deep.equal({ done: 0, failed: 1, cancelled: 0 });
  });

  it('a handler that outlives its lease keeps it: the loop beats, so nobody else gets the item and it is finished on the first attempt (decisions §3.2)', async () => {
    const q = await queue({ leaseSeconds: 1, maxAttempts: 3 });
    const { id } = await client.post(q, { n: 1 });
    const rec = recorder();
    const release = gate();
    const working = client.work(q, async () => {
      await release.opened;
      return { slow: true };
    }, { onEvent: rec.onEvent });
    await rec.waitFor((e) => e.event === 'claimed', 'the item claimed');
    // Past two lease lengths another worker still finds nothing to claim.
    const other = await client.claim(q, { worker: 'other', wait: 2 });
    expect(other.empty).to.equal(true);
    release.open();
    const status = await client.item(q, id, 20);
    expect(status).to.include({ status: 'finished', attempts: 1 });
    expect(status.result).to.deep.equal({ slow: true });
    await working.stop();
  });

  it('job.progress() posts progress, which the item shows while the handler runs', async () => {
    const q = await queue();
    const { id } = await client.post(q, { n: 1 });
    const release = gate();
    const working = client.work(q, async (_item, job) => {
      job.progress(40);
      await release.opened;
      job.progress({ step: 'last' });
      return {};
    });
    for (;;) {
      const status = await client.item(q, id);
      if (status.status === 'processing' && JSON.stringify(status.progress) === '{"percent":40}') break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    release.open();
    const status = await client.item(q, id, 20);
    expect(status.status).to.equal('finished');
    expect(status.progress).to.deep.equal({ step: 'last' });
    await working.stop();
  });

  it('stop() claims nothing more and lets the running handler finish; its result is delivered before stop() settles', async () => {
    const q = await queue();
    const first = await client.post(q, { n: 1 });
    const rec = recorder();
    const release = gate();
    const working = client.work(q, async () => {
      await release.opened;
      return { ok: 1 };
    }, { onEvent: rec.onEvent });
    await rec.waitFor((e) => e.event === 'claimed', 'the item claimed');
    const stopped = working.stop();
    const second = await client.post(q, { n: 2 });
    release.open();
    expect(await stopped).to.deep.equal({ done: 1, failed: 0, cancelled: 0 });
    expect((await client.item(q, first.id)).status).to.equal('finished');
    expect((await client.item(q, second.id)).status).to.equal('pending');
  });

  it('a cancelled item aborts its handler\'s signal, and nothing is delivered for it (decisions §3.6)', async () => {
    const q = await queue({ leaseSeconds: 1 });
    const { id } = await client.post(q, { n: 1 });
    const rec = recorder();
    let sawAbort = false;
    const working = client.work(q, (_item, job) => new Promise((resolve) => job.signal.addEventListener('abort', () => ((sawAbort = true), resolve({ never: 'sent' })))), { onEvent: rec.onEvent });
    await rec.waitFor((e) => e.event === 'claimed', 'the item claimed');
    await client.cancel(q, id);
    await rec.waitFor((e) => e.event === 'cancelled', 'the cancel noticed by a heartbeat');
    expect(sawAbort).to.equal(true);
    expect((await client.item(q, id)).status).to.equal('cancelled');
    expect(await working.stop()).to.deep.equal({ done: 0, failed: 0, cancelled: 1 });
  });

  it('a queue it may not work settles done with the wall error', async () => {
    const working = client.work(uniqueName('nowhere'), () => ({}));
    const err = await working.done.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(ClientError);
    expect((err as ClientError).code).to.equal('wall');
  });

  it('§8.2: a RetryIn error passes its wish on: the item is not claimable before then', async () => {
    const q = await queue({ maxAttempts: 3 });
    const { id } = await client.post(q, { n: 1 });
    const working = client.work(q, () => {
      throw new RetryIn(3600, 'the service said later');
    });
    for (;;) {
      const status = await client.item(q, id);
      if (status.attempts === 1 && status.status === 'pending') {
        expect(status.runAt).to.be.above(Date.now() + 3500_000);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await working.stop();
  });

  it('§8.2: a Final error fails the item at once, attempts left or not', async () => {
    const q = await queue({ maxAttempts: 5 });
    const { id } = await client.post(q, { n: 1 });
    const working = client.work(q, () => {
      throw new Final('bad input');
    });
    const status = await client.item(q, id, 20);
    expect(status).to.include({ status: 'failed', attempts: 1 });
    expect(status.error).to.deep.equal({ name: 'Final', message: 'bad input' });
    await working.stop();
  });

  it('§8.2: a Release hands the item back, its attempt not counted', async () => {
    const q = await queue({ maxAttempts: 5 });
    const { id } = await client.post(q, { n: 1 });
    const rec = recorder();
    const working = client.work(q, () => {
      throw new Release(3600);
    }, { onEvent: rec.onEvent });
    await rec.waitFor((e) => e.event === 'released' && e.id === id, 'the item released');
    await working.stop();
    const status = await client.item(q, id);
    expect(status).to.include({ status: 'pending', attempts: 0 });
  });

  it('§8.2: stop() releases the items claimed ahead that were not started: they are claimable at once, attempts not counted', async () => {
    const q = await queue({ leaseSeconds: 300 });
    const ids = (await Promise.all(Array.from({ length: 5 }, (_, n) => client.post(q, { n })))).map((a) => a.id);
    const rec = recorder();
    const release = gate();
    const working = client.work(q, async () => {
      await release.opened;
      return {};
    }, { prefetch: 5, onEvent: rec.onEvent });
    await rec.waitFor((e) => e.event === 'claimed', 'the first item started');
    const stopped = working.stop();
    release.open();
    expect((await stopped).done).to.equal(1);
    const released = rec.events.filter((e) => e.event === 'released').map((e) => (e as { id: string }).id);
    expect(released).to.have.length(4);
    for (const id of released) expect(await client.item(q, id)).to.include({ status: 'pending', attempts: 0 });
    expect(ids).to.include.members(released);
  });
});

describe('client.work() and the server (decisions §3.8 hand-ins; a server that goes away)', function () {
  this.timeout(60_000);

  it('hands each result in with the next claim: no result request of its own', async () => {
    const server = await startServer();
    const q = uniqueName('work');
    try {
      await defineQueue(server, HOST, q, { access: PUBLIC_ACCESS });
      const client = new SvcqClient({ url: server.url, host: HOST });
      const ids = (await Promise.all(Array.from({ length: 5 }, (_, n) => client.post(q, { n })))).map((a) => a.id);
      const working = client.work(q, (item) => item, { prefetch: 1 });
      for (const id of ids) expect((await client.item(q, id, 20)).status).to.equal('finished');
      await working.stop();
    } finally {
      await server.stop();
    }
    const lines = readFileSync(path.join(server.root, '_svcq/logs/access.log'), 'utf8').split('\n').filter((l) => l.includes(`/${q}/`));
    cleanupTemp(server.root);
    expect(lines.filter((l) => l.includes('/result'))).to.deep.equal([]);
    expect(lines.filter((l) => l.includes('/claim')).length).to.be.at.least(5);
  });

  it('a server that stops while a handler runs: the loop waits for it, then delivers the result (the run is not lost)', async () => {
    const first = await startServer();
    const q = uniqueName('work');
    await defineQueue(first, HOST, q, { access: PUBLIC_ACCESS, leaseSeconds: 60 });
    const client = new SvcqClient({ url: first.url, host: HOST });
    const { id } = await client.post(q, { n: 1 });
    const rec = recorder();
    const release = gate();
    const working = client.work(q, async () => {
      await release.opened;
      return { survived: true };
    }, { onEvent: rec.onEvent, waitSeconds: 1 });
    await rec.waitFor((e) => e.event === 'claimed', 'the item claimed');
    await first.stop();
    release.open();
    await rec.waitFor((e) => e.event === 'retry', 'a call retried while the server is away');
    const second = await startServer({ root: first.root, port: first.port });
    try {
      await rec.waitFor((e) => e.event === 'finished' && e.id === id, 'the result delivered');
      await rec.waitFor((e) => e.event === 'reconnected', 'the server back');
      expect((await client.item(q, id)).result).to.deep.equal({ survived: true });
      expect(await working.stop()).to.deep.equal({ done: 1, failed: 0, cancelled: 0 });
    } finally {
      await second.stop();
      cleanupTemp(first.root);
    }
  });
});
