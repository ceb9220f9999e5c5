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

/** Answers with a JSON body (200). */
function json(res: http.ServerResponse, body: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/** A stand-in for the server that plays out one case: `answer` gets each request once its body is read. */
async function fakeServer(answer: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void): Promise<{ url: string; close: () => Promise<void> }> {
  const fake = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => answer(req, res, text));
  });
  await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(fake.address() as AddressInfo).port}`,
    close: async () => {
      fake.closeAllConnections();
      await new Promise((resolve) => fake.close(resolve));
    },
  };
}

/** A lease of `ms` from now, as a claim's answer gives it. */
const lease = (ms: number): { worker: string; until: number } => ({ worker: 'w', until: Date.now() + ms });

type Done = Array<{ id: string; result?: unknown; error?: unknown }>;

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

  it('with --prefetch, claims no more ahead than it can start before half their lease has run, at the pace of its jobs so far: jobs of a second under a 5 s lease are leased two at a time (decisions §3.8)', async () => {
    const queue = queueName('half-lease');
    await defineQueue(server, queue, { leaseSeconds: 5 });
    for (let n = 0; n < 6; n++) await postItem(server, queue, { n });
    worker = startWorker(server, queue, ['--exec', 'sleep 1; cat', '--prefetch', '10']);
    await worker.waitEvent((e) => e.event === 'finished', 'the first job finished', 15_000);
    // From then on each claim takes as many as can start within 2.5 s: two of these jobs.
    let most = 0;
    for (const until = Date.now() + 4000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
      const c = await counts(server, queue);
      most = Math.max(most, c.claimed + c.processing);
    }
    expect(most, 'items leased at once').to.be.within(1, 2);
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

  it('the first signal starts no item claimed ahead: the stop ends with the running job, and the others are released for another worker (decisions §1.3, §8.2)', async () => {
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
    // The items not started are released (decisions §8.2), and another worker does them.
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

  it('--once gives up on a server that accepts and never answers after --wait seconds (5 at least), not 15 s past each try (docs/behaviour.md: svcq work)', async () => {
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

  it('--once --json gives up with { "error": sentence } on stderr (docs/behaviour.md: --json)', async () => {
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
  for (const kind of ['result', 'error'] as const) {
    it(`${kind === 'error' ? 'an' : 'a'} ${kind} handed in with a claim whose answer was lost is ${kind === 'result' ? 'sent again with the next claim: a result applied twice is answered accepted: false' : 'not sent again: applied twice it would use up another attempt'} (decisions §3.2, §3.8)`, async () => {
      // The claim carrying the hand-in reaches the server, which then breaks the connection, as one
      // that applied it and died before answering does; later claims are answered as usual (empty).
      const id = '00000000000000bb';
      const handedIn: string[] = [];
      let claims = 0;
      let lost = false;
      const fake = await fakeServer((req, res, body) => {
        const own = /\/items\/[0-9a-f]+\/(result|error)$/.exec(req.url ?? '');
        if (own) {
          handedIn.push(own[1]!);
          return json(res, { ok: true, accepted: true, status: own[1] === 'result' ? 'finished' : 'failed' });
        }
        claims++;
        const done = (JSON.parse(body) as { done?: Done }).done ?? [];
        handedIn.push(...done.map((d) => ('result' in d ? 'result' : 'error')));
        if (claims === 1) return json(res, { ok: true, id, item: { n: 1 }, attempts: 1, lease: lease(60_000) });
        if (done.length > 0 && !lost) {
          lost = true;
          req.socket.destroy();
          return;
        }
        json(res, { ok: true, empty: true, ...(done.length > 0 ? { done: done.map((d) => ({ id: d.id, ok: true, accepted: true, status: 'result' in d ? 'finished' : 'failed' })) } : {}) });
      });
      try {
        worker = startWorker(fake, 'q', ['--exec', kind === 'result' ? 'echo \'{"ok":true}\'' : 'exit 3']);
        const w = worker;
        await until(() => lost, 'the claim carrying the hand-in');
        // The claim is tried again at once, and claims go on: room enough to carry it again.
        await until(() => claims >= 4, 'more claims');
        if (kind === 'result') {
          expect(handedIn, 'hand-ins').to.deep.equal(['result', 'result']);
          await w.waitEvent((e) => e.event === 'finished' && e.id === id, 'the finished event');
        } else {
          expect(handedIn, 'hand-ins').to.deep.equal(['error']);
          await w.waitEvent((e) => e.event === 'error' && e.id === id && /not sent again/.test(String(e.message)), 'the error saying it was not sent again');
        }
      } finally {
        await fake.close();
      }
    });
  }

  it('an error record answered 503 by a proxy in front of the server (not svcq\'s own { error }) is not sent again, and the worker says the answer does not tell whether it was applied (decisions §3.2)', async () => {
    // A proxy such as Envoy answers 503 when the connection to the server broke after it passed
    // the request on: the server may have applied it.
    let errors = 0;
    const fake = await fakeServer((req, res) => {
      if (/\/items\/[0-9a-f]+\/error$/.test(req.url ?? '')) {
        errors++;
        return void res.writeHead(503, { 'content-type': 'text/plain' }).end('upstream connect error or disconnect/reset before headers');
      }
      json(res, { ok: true, id: '00000000000000e1', item: { n: 1 }, attempts: 1, lease: lease(60_000) });
    });
    try {
      const run = await runCli(['work', 'q', '--url', fake.url, '--host', HOST, '--once', '--exec', 'exit 3']);
      expect(run.code).to.equal(1);
      expect(run.stdout + run.stderr).to.include('error record not sent again');
      expect(run.stdout + run.stderr).to.include('the answer (HTTP 503, not svcq\'s own) does not say whether it was applied');
      expect(errors, 'the error was sent again').to.equal(1);
    } finally {
      await fake.close();
    }
  });

  it('each result handed in with a claim is settled by its own answer: one the server answers ok: false for (no such item) is counted as not delivered, the other as done (decisions §3.8)', async () => {
    // One claim brings two items; the claim that carries both results is answered ok: false for the first.
    const [gone, kept] = ['00000000000000b1', '00000000000000b2'];
    let claims = 0;
    const fake = await fakeServer((req, res, body) => {
      claims++;
      const done = (JSON.parse(body) as { done?: Done }).done ?? [];
      if (claims === 1) return json(res, { ok: true, items: [gone, kept].map((id, n) => ({ id, item: { n }, attempts: 1, lease: lease(60_000) })) });
      json(res, { ok: true, items: [], ...(done.length > 0 ? { done: done.map((d) => (d.id === gone ? { id: d.id, ok: false, error: 'no such item' } : { id: d.id, ok: true, accepted: true, status: 'finished' })) } : {}) });
    });
    try {
      worker = startWorker(fake, 'q', ['--exec', 'echo \'{"ok":true}\'', '--prefetch', '2']);
      const w = worker;
      await w.waitEvent((e) => e.event === 'finished' && e.id === kept, 'the finished event');
      await w.waitEvent((e) => e.event === 'error' && e.id === gone && /^result not delivered: no such item/.test(String(e.message)), 'the error event');
      w.proc.kill('SIGTERM');
      expect(await w.exited).to.equal(0);
      expect(w.events.find((e) => e.event === 'stopped')).to.include({ done: 1, failed: 1 });
      expect(w.events.filter((e) => e.event === 'finished').map((e) => e.id)).to.deep.equal([kept]);
    } finally {
      await fake.close();
    }
  });

  for (const ended of ['timedout', 'gone'] as const) {
    it(`an item that ${ended === 'gone' ? 'the server no longer has' : 'timed out on the server'} while its command runs has the command stopped, and is counted failed, not cancelled (decisions §3.6)`, async () => {
      // The heartbeat's answer says so: a 3 s lease beats every second.
      const id = '00000000000000e1';
      let claims = 0;
      const fake = await fakeServer((req, res) => {
        if (req.url?.endsWith('/progress')) {
          if (ended === 'gone') return res.writeHead(404, { 'content-type': 'application/json' }).end('{"ok":false,"error":"no such item"}');
          return json(res, { ok: true, accepted: false, status: 'timedout' });
        }
        claims++;
        if (claims === 1) return json(res, { ok: true, id, item: { n: 1 }, attempts: 1, lease: lease(3000) });
        json(res, { ok: true, empty: true });
      });
      try {
        worker = startWorker(fake, 'q', ['--exec', 'sleep 20']);
        const w = worker;
        const stopped = await w.waitEvent((e) => e.event === 'cancelled' && e.id === id, 'the command stopped', 8000);
        expect(stopped.status).to.equal(ended);
        w.proc.kill('SIGTERM');
        expect(await w.exited).to.equal(0);
        expect(w.events.find((e) => e.event === 'stopped')).to.include({ done: 0, failed: 1, cancelled: 0 });
      } finally {
        await fake.close();
      }
    });
  }

  it('while a result cannot be delivered, no slot claims anything new: a worker cut off from its server does not pile up results it cannot hand in; once it is through, every slot claims again (decisions §1.3)', async () => {
    const queue = queueName('gate');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    const first = await postItem(server, queue, { n: 1 });
    // Results are lost on the way until the proxy lets them through.
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/items/[0-9a-f]+/result `));
    proxy.passOnly = 0;
    try {
      worker = startWorker({ url: proxy.url }, queue, ['--exec', 'item=$(cat); case "$item" in *slow*) sleep 1 ;; esac; echo "$item"', '--concurrency', '2', '--no-hand-in']);
      const w = worker;
      await w.waitEvent((e) => e.event === 'retry' && e.what === 'result' && e.id === first, 'the result retried');
      // The other slot's long poll (--wait 1) under way then ends; it then waits for the delivery.
      await new Promise((r) => setTimeout(r, 1500));
      const second = await postItem(server, queue, { n: 2 });
      await new Promise((r) => setTimeout(r, 1500));
      expect((await getItem(server, queue, second)).status, 'the item posted while a result was undelivered').to.equal('pending');
      proxy.passOnly = Infinity;
      expect((await waitTerminal(server, queue, first, 20)).status).to.equal('finished');
      expect((await waitTerminal(server, queue, second, 20)).status).to.equal('finished');
      // Both slots claim again: two jobs of a second each run side by side.
      const pair = [await postItem(server, queue, { n: 3, slow: true }), await postItem(server, queue, { n: 4, slow: true })];
      for (const id of pair) await w.waitEvent((e) => e.event === 'claimed' && e.id === id, 'both slots claiming');
      const firstDone = w.events.findIndex((e) => e.event === 'finished' && pair.includes(e.id!));
      const bothClaimed = Math.max(...pair.map((id) => w.events.findIndex((e) => e.event === 'claimed' && e.id === id)));
      expect(firstDone === -1 || bothClaimed < firstDone, 'the second of them was claimed only after the first finished').to.equal(true);
    } finally {
      proxy.close();
    }
  });

  it('an item claimed ahead whose lease ran out while it waited for a slot is not started: the server hands it out again, maybe to another worker already (decisions §3.8)', async () => {
    // One claim brings two items, the second with a lease that has already run out (it waited behind a job that took longer than its lease).
    const [fresh, stale] = ['00000000000000c1', '00000000000000c2'];
    const runs = path.join(dir, 'runs');
    let claims = 0;
    const fake = await fakeServer((req, res, body) => {
      if (!req.url?.endsWith('/claim')) return json(res, { ok: true, accepted: true, status: 'finished' });
      claims++;
      const done = (JSON.parse(body) as { done?: Done }).done ?? [];
      if (claims > 1) return json(res, { ok: true, items: [], done: done.map((d) => ({ id: d.id, ok: true, accepted: true, status: 'finished' })) });
      json(res, {
        ok: true,
        items: [
          { id: fresh, item: { n: 1 }, attempts: 1, lease: lease(60_000) },
          { id: stale, item: { n: 2 }, attempts: 1, lease: lease(-5000) },
        ],
      });
    });
    try {
      worker = startWorker(fake, 'q', ['--exec', `echo "$SVCQ_ITEM_ID" >> ${runs}; echo '{"ok":true}'`, '--prefetch', '5']);
      await worker.waitEvent((e) => e.event === 'warning' && e.id === stale && /lease ran out/.test(String(e.message)), 'the warning for the stale item');
      await until(() => claims >= 3, 'the claims after it');
      expect(readFileSync(runs, 'utf8'), 'items run').to.equal(`${fresh}\n`);
    } finally {
      await fake.close();
    }
  });

  it('an item claimed ahead that has waited half its lease or more is beaten for as soon as it starts, so its lease does not run out before the first heartbeat (decisions §3.2, §3.8)', async () => {
    // One claim brings two items: the first with a 9 s lease (a heartbeat every 3 s), the second with
    // 2 s of it left, as if it had waited. The first job takes half a second; the second 3.5 s.
    const [first, second] = ['00000000000000d1', '00000000000000d2'];
    let secondUntil = 0;
    let secondBeat = 0;
    let claims = 0;
    const fake = await fakeServer((req, res, body) => {
      if (req.url?.endsWith(`/items/${second}/progress`) && secondBeat === 0) secondBeat = Date.now();
      if (!req.url?.endsWith('/claim')) return json(res, { ok: true, accepted: true, status: 'processing' });
      claims++;
      const done = (JSON.parse(body) as { done?: Done }).done ?? [];
      if (claims > 1) return json(res, { ok: true, items: [], done: done.map((d) => ({ id: d.id, ok: true, accepted: true, status: 'finished' })) });
      const b = lease(2000);
      secondUntil = b.until;
      json(res, {
        ok: true,
        items: [
          { id: first, item: { n: 1 }, attempts: 1, lease: lease(9000) },
          { id: second, item: { n: 2 }, attempts: 1, lease: b },
        ],
      });
    });
    try {
      worker = startWorker(fake, 'q', ['--exec', `sleep 0.5; [ "$SVCQ_ITEM_ID" = ${first} ] || sleep 3; echo '{}'`, '--prefetch', '5']);
      await worker.waitEvent((e) => e.event === 'finished' && e.id === second, 'the second job finished', 15_000);
      expect(secondBeat, 'a heartbeat for the second item').to.be.above(0);
      expect(secondBeat - secondUntil, 'ms past the end of its lease that the first heartbeat came').to.be.below(0);
    } finally {
      await fake.close();
    }
  });
});
