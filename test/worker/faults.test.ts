import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { faultProxy } from '../support/fault-proxy.js';
import { request } from '../support/http.js';
import { cleanupTemp, serverForSuite, tempDir } from '../support/server.js';
import { silentServer } from '../support/silent-server.js';
import { defineQueue, getItem, HOST, killWorker, postItem, queueName, startWorker, until, waitTerminal, type WorkerProcess } from './support.js';

/** Items of a queue by status, from the operators' view (decisions §5.1). */
async function counts(server: { url: string; masterToken: string }, queue: string): Promise<Record<string, number>> {
  const reply = await request(server.url, `/api/v2/queues/${HOST}/${queue}`, { token: server.masterToken });
  return (reply.json as { counts: Record<string, number> }).counts;
}

describe('svcq work when answers are lost, signals come and claims run ahead (decisions §1.3, §3.2, §3.8)', function () {
  this.timeout(60_000);
  const server = serverForSuite();
  let worker: WorkerProcess | undefined;
  let dir: string;
  beforeEach(() => {
    dir = tempDir('svcq-faults-');
  });
  afterEach(async () => {
    await killWorker(worker);
    worker = undefined;
    cleanupTemp(dir);
  });

  it('an error record whose answer was lost is not sent again: applied twice it would fail the next worker\'s attempt (decisions §3.2)', async () => {
    const queue = queueName('lost-error');
    await defineQueue(server, queue, { maxAttempts: 2, leaseSeconds: 30 });
    const id = await postItem(server, queue, { n: 1 });
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/items/${id}/error `));
    try {
      proxy.dropAnswers = 1;
      // Worker A fails the first attempt; the server re-queues the item, A never hears so.
      const a = await runCli(['work', queue, '--url', proxy.url, '--host', HOST, '--once', '--exec', 'exit 3']);
      expect(a.code).to.equal(1);
      expect(a.stdout + a.stderr).to.match(/not sent again/);
      expect(proxy.matched, 'the error was sent again').to.equal(1);
      // Worker B runs the second attempt, and it counts.
      const b = await runCli(['work', queue, '--url', server.url, '--host', HOST, '--once', '--exec', 'echo \'{"ok":true}\'']);
      expect(b.code, b.stderr).to.equal(0);
      const item = await getItem(server, queue, id);
      expect(item).to.include({ status: 'finished', attempts: 2 });
      expect(item.result).to.deep.equal({ ok: true });
    } finally {
      proxy.close();
    }
  });

  it('before the pace of its jobs is known, a worker with --prefetch claims one item per slot, not more (decisions §3.8)', async () => {
    const queue = queueName('pace');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    for (let n = 0; n < 20; n++) await postItem(server, queue, { n });
    worker = startWorker(server, queue, ['--exec', 'sleep 2; cat', '--concurrency', '4', '--prefetch', '10']);
    await until(async () => (await counts(server, queue)).claimed + (await counts(server, queue)).processing >= 4, 'four jobs running');
    await new Promise((r) => setTimeout(r, 300));
    const c = await counts(server, queue);
    expect(c.claimed + c.processing, 'items leased before any job ended').to.equal(4);
  });

  it('a finished job is known accepted at once, not when the long poll that carried its result ends, and a stop does not send it again (decisions §3.8)', async () => {
    const queue = queueName('prompt');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    worker = startWorker(server, queue, ['--exec', 'cat', '--wait', '20']);
    await worker.waitEvent((e) => e.event === 'started', 'the worker started');
    const id = await postItem(server, queue, { n: 1 });
    // The queue is empty after it: a claim carrying the result and held for the wait would answer in 20 s.
    const finished = await worker.waitEvent((e) => e.event === 'finished' && e.id === id, 'the finished event', 5000);
    expect(finished).to.include({ accepted: true, status: 'finished' });
    worker.proc.kill('SIGINT');
    expect(await worker.exited).to.equal(0);
    expect(worker.events.filter((e) => e.event === 'finished' && e.id === id)).to.have.length(1);
  });

  it('a third signal gives up a result whose submission hangs: exit 1, saying it was not delivered, not that the server answered (decisions §1.3)', async () => {
    const queue = queueName('third');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    const proxy = await faultProxy(server.url, /^POST \/[^ ]+\/items\/[0-9a-f]{16}\/result /);
    proxy.hold = true;
    try {
      const id = await postItem(server, queue, { n: 1 });
      worker = startWorker({ url: proxy.url }, queue, ['--exec', 'cat', '--no-hand-in']);
      await worker.waitEvent((e) => e.event === 'claimed' && e.id === id, 'the item claimed');
      await until(() => proxy.matched > 0, 'the result submitted', 10_000);
      for (let n = 0; n < 3; n++) {
        worker.proc.kill('SIGINT');
        await new Promise((r) => setTimeout(r, 300));
      }
      expect(await worker.exited).to.equal(1);
      const w = worker;
      expect(w.events.some((e) => e.event === 'error' && /^result not delivered \(gave up on signal\): the request was abandoned/.test(String(e.message))), w.stderr()).to.equal(true);
      expect(w.events.some((e) => e.event === 'reconnected')).to.equal(false);
      expect(w.stderr()).not.to.match(/reporting an error instead|answers again/);
    } finally {
      proxy.close();
    }
  });

  it('the first signal starts no item claimed ahead: the stop ends with the running job, the others are left to their leases (decisions §1.3)', async () => {
    const queue = queueName('stop-ahead');
    await defineQueue(server, queue, { leaseSeconds: 2, maxAttempts: 3 });
    // A first short job sets the pace, so that the next claim takes several items ahead.
    const ids = [await postItem(server, queue, { n: 0, s: 0 })];
    for (let n = 1; n <= 4; n++) ids.push(await postItem(server, queue, { n, s: 1 }));
    worker = startWorker(server, queue, ['--exec', 'item=$(cat); case "$item" in *\'"s":0\'*) ;; *) sleep 1 ;; esac; echo "$item"', '--prefetch', '5']);
    await worker.waitEvent((e) => e.event === 'claimed' && e.id === ids[1], 'the second item started');
    worker.proc.kill('SIGINT');
    const started = Date.now();
    expect(await worker.exited).to.equal(0);
    expect(Date.now() - started, 'the stop waited for prefetched items').to.be.below(2500);
    const claimedIds = worker.events.filter((e) => e.event === 'claimed').map((e) => e.id);
    expect(claimedIds, 'items started').to.deep.equal(ids.slice(0, 2));
    expect(worker.events.some((e) => e.event === 'warning' && /claimed ahead were not started/.test(String(e.message)))).to.equal(true);
    // The items not started come back when their leases end, and another worker does them.
    const other = startWorker(server, queue, ['--exec', 'cat']);
    try {
      for (const id of ids.slice(2)) expect((await waitTerminal(server, queue, id, 20)).status).to.equal('finished');
    } finally {
      await killWorker(other);
    }
  });

  it('a stop waits for a result already submitted on its own (no claim came to carry it) and counts it before saying it stopped (decisions §1.3: running commands finish and deliver, then it exits)', async () => {
    const queue = queueName('stop-flush');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    // A first short job sets the pace, so that the next claim takes the others ahead.
    const ids = [await postItem(server, queue, { n: 0, s: 0 })];
    for (let n = 1; n <= 3; n++) ids.push(await postItem(server, queue, { n, s: 1 }));
    // The second item's result finds no claim to carry it (the slot runs an item claimed ahead), so it goes on its own, and is lost on the way until the proxy lets it through.
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/items/${ids[1]}/result `));
    proxy.passOnly = 0;
    try {
      worker = startWorker({ url: proxy.url }, queue, ['--exec', 'item=$(cat); case "$item" in *\'"s":0\'*) ;; *) sleep 1.5 ;; esac; echo "$item"', '--prefetch', '5']);
      const w = worker;
      await w.waitEvent((e) => e.event === 'retry' && e.what === 'result' && e.id === ids[1], 'the second result retried');
      w.proc.kill('SIGINT');
      await w.waitEvent((e) => e.event === 'finished' && e.id === ids[2], 'the running job delivered');
      await new Promise((r) => setTimeout(r, 500));
      proxy.passOnly = Infinity;
      expect(await w.exited).to.equal(0);
      const order = w.events.filter((e) => e.event === 'stopped' || (e.event === 'finished' && e.id === ids[1])).map((e) => e.event);
      expect(order, w.stderr()).to.deep.equal(['finished', 'stopped']);
      expect(w.events.find((e) => e.event === 'stopped')).to.include({ done: 3 });
      expect((await getItem(server, queue, ids[1])).status).to.equal('finished');
    } finally {
      proxy.close();
    }
  });

  it('an item claimed again while this worker still holds the result of its last run is not run again: that result, once through, finishes it (decisions §3.2: a late result is accepted)', async () => {
    const queue = queueName('held');
    await defineQueue(server, queue, { leaseSeconds: 1, maxAttempts: 3 });
    const id = await postItem(server, queue, { n: 1 });
    const runs = path.join(dir, 'runs');
    // The result is lost on the way until the proxy lets it through; meanwhile the lease ends, and the other slot's long poll takes the item again.
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/items/${id}/result `));
    proxy.passOnly = 0;
    try {
      worker = startWorker({ url: proxy.url }, queue, ['--exec', `echo "$SVCQ_ATTEMPT" >> ${runs}; echo '{"ok":true}'`, '--concurrency', '2', '--no-hand-in', '--wait', '10']);
      const w = worker;
      await w.waitEvent((e) => e.event === 'retry' && e.what === 'result' && e.id === id, 'the result retried');
      await until(async () => (await getItem(server, queue, id)).attempts === 2, 'the item claimed again');
      await new Promise((r) => setTimeout(r, 500));
      proxy.passOnly = Infinity;
      const item = await waitTerminal(server, queue, id);
      expect(item).to.include({ status: 'finished', attempts: 2 });
      expect(item.result).to.deep.equal({ ok: true });
      expect(readFileSync(runs, 'utf8'), 'runs of the command').to.equal('1\n');
      expect(w.events.some((e) => e.event === 'warning' && e.id === id && /not run again/.test(String(e.message)))).to.equal(true);
    } finally {
      proxy.close();
    }
  });

  it('an item that an error handed in with one slot\'s claim re-queued, and that the other slot\'s claim took again before that answer came, is run for its new attempt (decisions §3.2, §3.8)', async () => {
    // A server that plays it out: slot 1 takes the item and fails it; its claim carries the error
    // and is answered late, while the other slot's long poll is answered with the item, re-queued
    // by that error and claimed again (attempt 2), as two claims of one transaction would be.
    const id = '00000000000000aa';
    const runs = path.join(dir, 'runs');
    const held: http.ServerResponse[] = [];
    const handedIn: Array<{ id: string; result?: unknown; error?: unknown }> = [];
    let claims = 0;
    const lease = (): { worker: string; until: number } => ({ worker: 'w', until: Date.now() + 60_000 });
    const json = (res: http.ServerResponse, body: unknown): void => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    const fake = http.createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        if (req.method !== 'POST' || !req.url?.endsWith('/claim')) {
          // A result or an error submitted on its own.
          const m = /\/items\/([0-9a-f]+)\/(result|error)$/.exec(req.url ?? '');
          if (m) handedIn.push({ id: m[1]!, [m[2]!]: JSON.parse(text) as unknown });
          return json(res, { ok: true, accepted: true, status: m?.[2] === 'result' ? 'finished' : 'pending' });
        }
        claims++;
        const body = JSON.parse(text) as { done?: Array<{ id: string; result?: unknown; error?: unknown }> };
        const done = body.done ?? [];
        handedIn.push(...done);
        if (claims === 1) return json(res, { ok: true, id, item: { n: 1 }, attempts: 1, lease: lease() });
        if (done.some((d) => d.id === id && 'error' in d)) {
          // The other slot's claim, held so far, is answered first with the item's next attempt.
          held.shift()?.end(JSON.stringify({ ok: true, id, item: { n: 1 }, attempts: 2, lease: lease() }));
          setTimeout(() => json(res, { ok: true, empty: true, done: done.map((d) => ({ id: d.id, ok: true, accepted: true, status: 'error' in d ? 'pending' : 'finished' })) }), 800);
          return;
        }
        if (done.length > 0) return json(res, { ok: true, empty: true, done: done.map((d) => ({ id: d.id, ok: true, accepted: true, status: 'finished' })) });
        res.writeHead(200, { 'content-type': 'application/json' });
        held.push(res);
      });
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
    try {
      worker = startWorker({ url }, 'q', ['--exec', `echo "$SVCQ_ATTEMPT" >> ${runs}; [ "$SVCQ_ATTEMPT" = 2 ] || exit 3; echo '{"ok":true}'`, '--concurrency', '2', '--wait', '5']);
      await until(() => handedIn.some((h) => h.id === id && 'result' in h), 'the second attempt\'s result', 8000).catch(() => undefined);
      expect(existsSync(runs) ? readFileSync(runs, 'utf8') : '', `runs of the command; worker events:\n${worker.events.map((e) => JSON.stringify(e)).join('\n')}`).to.equal('1\n2\n');
      expect(handedIn.filter((h) => h.id === id).map((h) => ('result' in h ? 'result' : 'error'))).to.deep.equal(['error', 'result']);
    } finally {
      for (const res of held) res.end('{"ok":true,"empty":true}');
      fake.closeAllConnections();
      await new Promise((resolve) => fake.close(resolve));
    }
  });

  it('--once gives up on a server that cannot be reached once its wait is over: exit 1 with one sentence (decisions §7)', async () => {
    const started = Date.now();
    const run = await runCli(['work', 'anything', '--url', 'http://127.0.0.1:1', '--host', HOST, '--once', '--wait', '2', '--exec', 'cat']);
    expect(run.code).to.equal(1);
    expect(Date.now() - started).to.be.below(10_000);
    expect(run.stdout + run.stderr).to.match(/cannot claim from anything: cannot reach/);
    // Giving up is not the server answering again.
    expect(run.stdout + run.stderr).not.to.match(/answers again|"reconnected"/);
  });

  it('--once gives up on a server that accepts and never answers after --wait seconds (5 at least), not 15 s past each try (README: svcq work)', async () => {
    const silent = await silentServer();
    try {
      const started = Date.now();
      const run = await runCli(['work', 'anything', '--url', silent.url, '--host', HOST, '--once', '--wait', '1', '--exec', 'cat']);
      const took = Date.now() - started;
      expect(run.code).to.equal(1);
      expect(run.stdout + run.stderr).to.match(/cannot claim from anything: cannot reach .* \(no answer within 5 s\)/);
      expect(took, `${took} ms`).to.be.below(12_000);
    } finally {
      await silent.close();
    }
  });

  it('--once --json gives up with { "error": sentence } on stderr (README: --json)', async () => {
    const run = await runCli(['work', 'anything', '--url', 'http://127.0.0.1:1', '--host', HOST, '--once', '--wait', '1', '--json', '--exec', 'cat']);
    expect(run.code).to.equal(1);
    const errors = run.stderr.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { error: string });
    expect(errors).to.have.length(1);
    expect(errors[0]!.error).to.match(/^cannot claim from anything: cannot reach http:\/\/127\.0\.0\.1:1 \(connection refused\)$/);
  });

  it('a result nested deeper than a claim may carry is submitted on its own, and the worker goes on (decisions §3.8)', async () => {
    const queue = queueName('deep');
    await defineQueue(server, queue);
    const deep = `${'{"a":'.repeat(70)}1${'}'.repeat(70)}`;
    const ids = [await postItem(server, queue, { n: 1 }), await postItem(server, queue, { n: 2 })];
    worker = startWorker(server, queue, ['--exec', `echo '${deep}'`]);
    for (const id of ids) expect((await waitTerminal(server, queue, id)).status).to.equal('finished');
    expect(worker.proc.exitCode).to.equal(null);
    worker.proc.kill('SIGTERM');
    expect(await worker.exited).to.equal(0);
  });
});
