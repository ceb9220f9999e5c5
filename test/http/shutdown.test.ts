import { existsSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS } from './queue-api.js';

const HOST = 'stop.example.com';

/** The exit code, or a failure if the process is still running after `ms`. */
async function exitWithin(server: TestServer, ms: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the server was still running ${ms} ms after the signal:\n${server.output()}`)), ms);
  });
  try {
    return await Promise.race([new Promise<number | null>((resolve) => server.proc.once('exit', (code) => resolve(code))), late]);
  } finally {
    clearTimeout(timer);
  }
}

function connect(server: TestServer): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1', () => resolve(socket));
    socket.on('error', () => undefined);
    socket.once('error', reject);
  });
}

describe('a stop that always ends (decisions §1.1)', function () {
  this.timeout(60_000);
  const servers: TestServer[] = [];
  after(async () => {
    for (const s of servers) {
      await s.kill9();
      cleanupTemp(s.root);
    }
  });

  it('one SIGTERM exits 0 within --shutdown-grace although connections stay silent, stop halfway through their headers, or trickle a body (decisions §1.1)', async () => {
    const server = await startServer({ args: ['--shutdown-grace', '1'] });
    servers.push(server);
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS });
    const silent = await connect(server);
    const half = await connect(server);
    half.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: appl`);
    const trickle = await connect(server);
    trickle.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":"`);
    const dripping = setInterval(() => trickle.write('x'), 200);
    try {
      await new Promise((r) => setTimeout(r, 300));
      const signalled = Date.now();
      server.proc.kill('SIGTERM');
      expect(await exitWithin(server, 4000)).to.equal(0);
      expect(Date.now() - signalled).to.be.below(4000);
    } finally {
      clearInterval(dripping);
      for (const s of [silent, half, trickle]) s.destroy();
    }
  });

  it('answers held long polls at once, closes keep-alive connections, and a worker that claims again in a loop does not keep it alive (decisions §1.1)', async () => {
    const server = await startServer({ args: ['--shutdown-grace', '2'] });
    servers.push(server);
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const claim = (): Promise<{ status: number; body: string; connection: string | undefined }> =>
      new Promise((resolve, reject) => {
        const body = JSON.stringify({ worker: 'looper', wait: 20 });
        const req = http.request(
          { host: '127.0.0.1', port: server.port, path: '/q/claim', method: 'POST', agent, headers: { host: HOST, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
          (res) => {
            let text = '';
            res.on('data', (c: Buffer) => (text += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode!, body: text, connection: res.headers.connection }));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    // A worker that claims again at once, whatever it is told, until its requests fail.
    let signalledAt = 0;
    const afterSignal: Array<{ status: number; body: string; connection: string | undefined }> = [];
    const loop = (async () => {
      for (let i = 0; i < 100_000; i++) {
        let reply;
        try {
          reply = await claim();
        } catch {
          return;
        }
        if (signalledAt > 0) afterSignal.push(reply);
      }
    })();
    await new Promise((r) => setTimeout(r, 500));
    signalledAt = Date.now();
    server.proc.kill('SIGTERM');
    expect(await exitWithin(server, 4000)).to.equal(0);
    await loop;
    agent.destroy();
    // The held claim was answered at once, empty, and the connection closed with it; nothing more was served.
    expect(afterSignal.length, JSON.stringify(afterSignal.slice(0, 5))).to.be.within(1, 2);
    expect(afterSignal[0]).to.deep.include({ status: 200, body: '{"ok":true,"empty":true}' });
  });

  it('a request whose head was still coming in when the stop came is answered with connection: close (decisions §1.1: a request that arrives on a connection after the signal)', async () => {
    const server = await startServer({ args: ['--shutdown-grace', '3'] });
    servers.push(server);
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS });
    const socket = await connect(server);
    let received = '';
    socket.on('data', (c: Buffer) => (received += c.toString()));
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\n`);
    await new Promise((r) => setTimeout(r, 300));
    server.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    socket.write('Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}');
    await closed;
    expect(received).to.match(/^HTTP\/1\.1 200 /);
    expect(received.toLowerCase()).to.include('connection: close');
    expect(await exitWithin(server, 6000)).to.equal(0);
  });

  it('without --shutdown-grace, a connection still short of a whole request is cut 5 s after the signal, and the server exits 0 (decisions §1.1)', async () => {
    const server = await startServer();
    servers.push(server);
    const half = await connect(server);
    half.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: appl`);
    try {
      await new Promise((r) => setTimeout(r, 300));
      const signalled = Date.now();
      server.proc.kill('SIGTERM');
      expect(await exitWithin(server, 9000)).to.equal(0);
      expect(Date.now() - signalled).to.be.within(4500, 9000);
    } finally {
      half.destroy();
    }
  });

  it('a request under way when the stop comes is answered, with connection: close, and a request sent after that answer on the same connection is not carried out (decisions §1.1: requests under way finish; §6: nothing changes without its answer)', async () => {
    const server = await startServer({ args: ['--shutdown-grace', '3'] });
    servers.push(server);
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS });
    const socket = await connect(server);
    const body = JSON.stringify({ n: 1, pad: 'x'.repeat(200) });
    const half = Math.floor(body.length / 2);
    let received = '';
    const firstAnswer = new Promise<string>((resolve) => {
      socket.on('data', (c: Buffer) => {
        received += c.toString();
        const end = received.indexOf('\r\n\r\n');
        const length = /content-length: *(\d+)/i.exec(received)?.[1];
        if (end >= 0 && length !== undefined && received.length >= end + 4 + Number(length)) resolve(received);
      });
    });
    // The first request is under way (its body half sent) when the signal comes.
    socket.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, half)}`);
    await new Promise((r) => setTimeout(r, 300));
    server.proc.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    socket.write(body.slice(half));
    const answer = await firstAnswer;
    expect(answer).to.match(/^HTTP\/1\.1 200 /);
    expect(answer.toLowerCase()).to.include('connection: close');
    // A client that reuses the connection anyway: what it sends now must not be carried out.
    const second = JSON.stringify({ n: 2 });
    if (!socket.destroyed) socket.write(`POST /q HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: ${second.length}\r\n\r\n${second}`);
    expect(await exitWithin(server, 6000)).to.equal(0);
    socket.destroy();

    const again = await startServer({ root: server.root });
    servers.push(again);
    const list = await fetch(`${again.url}/api/v2/queues`, { headers: { authorization: `Bearer ${again.masterToken}` } });
    const queues = (await list.json()) as { queues: Array<{ name: string; counts: { pending: number } }> };
    expect(queues.queues.find((q) => q.name === 'q')?.counts.pending, 'items on the server after the stop').to.equal(1);
  });

  it('a start that cannot have its port creates nothing under its root (decisions §1.1)', async () => {
    const server = await startServer();
    servers.push(server);
    const parent = tempDir();
    const root = path.join(parent, 'data');
    try {
      const second = await runCli(['serve', '--root', root, '--port', String(server.port)]);
      expect(second.code).to.equal(1);
      expect(second.stderr).to.match(/^svcq: cannot start: port \d+ on 127\.0\.0\.1 is already in use\n$/);
      expect(existsSync(root), 'the failed start created its root').to.equal(false);
    } finally {
      cleanupTemp(parent);
    }
  });
});
