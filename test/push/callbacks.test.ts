import { createHmac } from 'node:crypto';
import { readFileSync, symlinkSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { request } from '../support/http.js';
import { cleanupTemp, REPO, SERVER_STORE, startServer, tempDir, type TestServer } from '../support/server.js';
import { markedBlocks, normalise, runBlocks, type Block } from '../docs/doc-blocks.js';
import { defineQueue, PUBLIC_ACCESS, QueueApi, uniqueName, type Json } from '../http/queue-api.js';

const HOST = 'callbacks.example.com';
const SECRET = 'a-callback-secret-0123456789';

/** One POST a receiver got. */
interface Received {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * A real node:http receiver: answers each request with the next status of `answers` (the last one
 * once they are used up), and keeps what it got. Waits are on its requests, not on time.
 */
class Receiver {
  readonly got: Received[] = [];
  private readonly server: http.Server;
  private waiters: Array<() => void> = [];

  constructor(private readonly answers: number[]) {
    this.server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => {
        const status = this.answers.length > 1 ? this.answers.shift()! : this.answers[0]!;
        this.got.push({ path: req.url ?? '', headers: req.headers, body });
        res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : 'not now');
        for (const w of this.waiters.splice(0)) w();
      });
    });
  }

  async listen(port = 0): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(port, '127.0.0.1', resolve));
    return (this.server.address() as AddressInfo).port;
  }

  /** Resolves once `done` holds for what was received (checked at each request). */
  async until(done: (got: Received[]) => boolean, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!done(this.got)) {
      if (Date.now() > deadline) throw new Error(`the receiver did not get what was expected; got ${JSON.stringify(this.got.map((g) => [g.path, g.headers['svcq-item-id'], g.headers['svcq-event']]))}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 500).unref();
      });
    }
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** A port nothing listens on (taken, then given back). */
async function freePort(): Promise<number> {
  const s = http.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

function checkSignature(r: Received): void {
  const timestamp = r.headers['svcq-timestamp'] as string;
  expect(timestamp).to.match(/^\d+$/);
  const mac = createHmac('sha256', SECRET).update(`${timestamp}.${r.body}`).digest('hex');
  expect(r.headers['svcq-signature']).to.equal(`v1=${mac}`);
}

async function queueView(server: TestServer, name: string): Promise<Json> {
  const reply = await request(server.url, `/api/v2/queues/${HOST}/${name}`, { token: server.masterToken });
  expect(reply.status, reply.text).to.equal(200);
  return reply.json as Json;
}

describe(`callbacks when an item ends, black box on a real server (decisions §9.2, ${SERVER_STORE} store)`, function () {
  this.timeout(60_000);
  const servers: TestServer[] = [];
  const receivers: Receiver[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) {
      await s.stop();
      cleanupTemp(s.root);
    }
    for (const r of receivers.splice(0)) await r.close();
  });

  async function serve(port: number, root?: string): Promise<TestServer> {
    const server = await startServer({ fromSources: true, root, args: ['--push-allow', `http://127.0.0.1:${port}/`] });
    servers.push(server);
    return server;
  }

  it('POSTs the status record with svcq-event, svcq-queue and svcq-item-id; a failed attempt is tried again; the queue view and the metrics show it', async () => {
    const receiver = new Receiver([503, 200]);
    receivers.push(receiver);
    const port = await receiver.listen();
    const server = await serve(port);
    const name = uniqueName('cb');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, callback: `http://127.0.0.1:${port}/hook` });
    const q = new QueueApi(server, HOST, name);
    const id = await q.post({ job: 1 });
    await q.claim({ worker: 'w' });
    await q.submit(id, 'result', { done: true });
    await receiver.until((got) => got.length >= 2);
    const [first, second] = receiver.got;
    for (const r of [first!, second!]) {
      expect(r.path).to.equal('/hook');
      expect(r.headers).to.deep.include({ 'content-type': 'application/json', 'svcq-event': 'finished', 'svcq-queue': `${HOST}/${name}`, 'svcq-item-id': id });
      expect(r.headers).to.not.have.property('svcq-signature');
      const record = JSON.parse(r.body) as Json;
      expect(record).to.deep.include({ id, status: 'finished', attempts: 1, result: { done: true } });
    }
    // Settled once the 200 is recorded: the view shows nothing owed, the metrics one failed attempt and one delivered.
    const deadline = Date.now() + 5000;
    let view = await queueView(server, name);
    while ((view.callbacks as Json).owed !== 0 && Date.now() < deadline) view = await queueView(server, name);
    expect(view.callbacks).to.deep.equal({ owed: 0, failing: 0 });
    const metrics = await request(server.url, '/api/v2/metrics', { token: server.masterToken });
    expect(metrics.text).to.include(`svcq_callbacks_total{host="${HOST}",queue="${name}",outcome="failed"} 1`);
    expect(metrics.text).to.include(`svcq_callbacks_total{host="${HOST}",queue="${name}",outcome="delivered"} 1`);
  });

  it('the item\'s own ?callback comes first; a queue with push.secret signs it as decisions §9.1 says', async () => {
    const receiver = new Receiver([200]);
    receivers.push(receiver);
    const port = await receiver.listen();
    const server = await serve(port);
    const name = uniqueName('cb');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, callback: `http://127.0.0.1:${port}/queue`, push: { url: `http://127.0.0.1:${port}/push`, secret: SECRET } });
    const q = new QueueApi(server, HOST, name);
    const reply = await q.postRaw({ job: 2 }, {});
    expect(reply.status).to.equal(200);
    const own = await request(server.url, `/${name}?callback=${encodeURIComponent(`http://127.0.0.1:${port}/own`)}`, { method: 'POST', host: HOST, body: '{"job":3}' });
    expect(own.status, own.text).to.equal(200);
    const ownId = (own.json as Json).id as string;
    await q.submit(ownId, 'cancel');
    const queueId = ((reply.json as Json).id as string);
    await q.submit(queueId, 'cancel');
    const callback = (id: string): Received | undefined => receiver.got.find((g) => g.path !== '/push' && g.headers['svcq-item-id'] === id);
    await receiver.until(() => callback(ownId) !== undefined && callback(queueId) !== undefined);
    // A push delivery (decisions §9.1) may end an item before the cancel does: the event is then `finished`.
    for (const [id, path] of [[ownId, '/own'], [queueId, '/queue']] as const) {
      const r = callback(id)!;
      expect(r.path).to.equal(path);
      const record = JSON.parse(r.body) as Json;
      expect(r.headers['svcq-event']).to.equal(record.status);
      expect(['cancelled', 'finished']).to.include(record.status);
      checkSignature(r);
    }
  });

  it('callbacks owed when the server is killed (kill -9) with their target down are all delivered after a restart, once the target is up', async () => {
    const port = await freePort();
    const server = await serve(port);
    const name = uniqueName('cb');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, callback: `http://127.0.0.1:${port}/hook`, maxAttempts: 1 });
    const q = new QueueApi(server, HOST, name);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await q.post({ i }));
    await q.claim({ worker: 'w' });
    await q.submit(ids[0]!, 'result', { ok: 1 });
    await q.claim({ worker: 'w' });
    await q.submit(ids[1]!, 'error', { no: 1 });
    await q.submit(ids[2]!, 'cancel');
    // Each has failed at least once against the closed port before the kill.
    const deadline = Date.now() + 10_000;
    let view = await queueView(server, name);
    while ((view.callbacks as Json).failing !== 3 && Date.now() < deadline) view = await queueView(server, name);
    expect(view.callbacks).to.deep.equal({ owed: 3, failing: 3 });
    await server.kill9();
    servers.splice(servers.indexOf(server), 1);
    const receiver = new Receiver([200]);
    receivers.push(receiver);
    await receiver.listen(port);
    const again = await serve(port, server.root);
    await receiver.until((got) => ids.every((id) => got.some((g) => g.headers['svcq-item-id'] === id)));
    const events = new Map(receiver.got.map((g) => [g.headers['svcq-item-id'], g.headers['svcq-event']]));
    expect(ids.map((id) => events.get(id))).to.deep.equal(['finished', 'failed', 'cancelled']);
    const end = Date.now() + 5000;
    view = await queueView(again, name);
    while ((view.callbacks as Json).owed !== 0 && Date.now() < end) view = await queueView(again, name);
    expect(view.callbacks).to.deep.equal({ owed: 0, failing: 0 });
  });

  it('runs the example of docs/callbacks.md: its receiver is told the item finished, with its result (STYLE: examples are executable and tested)', async function () {
    if (SERVER_STORE === 'postgres') {
      console.log('      skipped on PostgreSQL: the example starts an embedded server of its own');
      this.skip();
    }
    const work = tempDir('svcq-callbacks-doc-');
    const dir = tempDir('svcq-callbacks-run-');
    symlinkSync(path.join(REPO, 'bin'), path.join(work, 'bin'));
    const port = await freePort();
    const hook = await freePort();
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_')) delete env[key];
    env.SVCQ_PORT = String(port);
    const doc = readFileSync(path.join(REPO, 'docs/callbacks.md'), 'utf8');
    const adapt = (text: string): string => text.replaceAll('8080', String(port)).replaceAll('9000', String(hook));
    const blocks = markedBlocks(doc, 'callbacks').map((b): Block => ({ ...b, code: adapt(b.code), ...(b.ready === undefined ? {} : { ready: adapt(b.ready) }) }));
    expect(blocks.map((b) => b.kind)).to.deep.equal(['background', 'background', 'run']);
    const run = await runBlocks(blocks, { cwd: work, env, dir, name: 'callbacks' });
    try {
      expect(run.code, `${run.stdout}\n${run.stderr}\n${run.started.map((s) => s.output()).join('\n---\n')}`).to.equal(0);
      expect(normalise(run.perBlock[2]!)).to.equal(normalise(blocks[2]!.prints!));
      const receiver = run.started[0]!;
      const deadline = Date.now() + 10_000;
      while (!/finished [0-9a-f]{16} \{ frames: 240 \}/.test(receiver.output()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(receiver.output()).to.match(/finished [0-9a-f]{16} \{ frames: 240 \}/);
    } finally {
      for (const s of run.started) s.proc.kill('SIGKILL');
      await Promise.all(run.started.map((s) => s.exited));
      cleanupTemp(work);
      cleanupTemp(dir);
    }
  });
});
