import { spawn } from 'node:child_process';
import net from 'node:net';
import { expect } from 'chai';
import { ClientError, SvcqClient } from '../../src/client/index.js';
import { sha256Hex } from '../http/queue-api.js';
import { cleanupTemp, startServer } from '../support/server.js';

const HOST = 'jobs.example.com';
const TOKEN = 'resizer-token-0123456789abcdef0123';

/** The error a call failed with (the test fails if it answered). */
async function failure(call: Promise<unknown>): Promise<ClientError> {
  const err = await call.then(
    (answer) => expect.fail(`expected a ClientError, got ${JSON.stringify(answer)}`),
    (e: unknown) => e,
  );
  expect(err).to.be.instanceOf(ClientError);
  // Printed or logged, it says what it is (`ClientError: …`), not a bare `Error: …`.
  expect((err as Error).name).to.equal('ClientError');
  return err as ClientError;
}

/**
 * A port whose connections are never set up: a process listens on it with the smallest backlog
 * and never accepts, and that backlog is filled, so the system drops every further attempt to
 * connect (as a host that is down behind a firewall does).
 */
async function unconnectable(port: number): Promise<{ close: () => void }> {
  const script = `const s = require('node:net').createServer(); s.listen({ port: ${port}, host: '127.0.0.1', backlog: 1 }, () => { console.log('ready'); setTimeout(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120000), 50); });`;
  const proc = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => proc.stdout.once('data', resolve));
  await new Promise((resolve) => setTimeout(resolve, 200));
  const fillers = Array.from({ length: 5 }, () => net.connect(port, '127.0.0.1').on('error', () => undefined));
  await new Promise((resolve) => setTimeout(resolve, 300));
  return {
    close: () => {
      for (const s of fillers) s.destroy();
      proc.kill('SIGKILL');
    },
  };
}

describe('the client library under faults (docs/client.md: Errors, Time and abandoning)', function () {
  this.timeout(60_000);

  it('reaches a server at an IPv6 address, written in brackets as a URL writes it and as svcq serve --bind ::1 prints it (docs/client.md: Calls)', async () => {
    const server = await startServer({ port: 47160, args: ['--bind', '::1'] });
    try {
      expect(server.url).to.equal('http://[::1]:47160');
      const master = new SvcqClient({ url: server.url, token: server.masterToken });
      expect(await master.version()).to.deep.equal({ api: 2 });
      await master.putDefinition(`${HOST}/svc-users/resizer.json`, Buffer.from(JSON.stringify({ 'svc-user-name': 'resizer', tokenSha256: sha256Hex(TOKEN) })));
      await master.putDefinition(`${HOST}/svc-queues/thumbnails.json`, Buffer.from(JSON.stringify({ access: { post: ['resizer'], fetch: ['resizer'], work: ['resizer'] } })));
      const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
      const { id } = await c.post('thumbnails', { n: 1 });
      expect((await c.item('thumbnails', id)).status).to.equal('pending');
    } finally {
      await server.stop();
      cleanupTemp(server.root);
    }
  });

  it('a connection that cannot be set up fails with code timeout after timeoutMs, the client\'s or the call\'s (not a fixed 4 s, nor the limit plus a long poll\'s wait); 0 waits for ever (docs/client.md: Time and abandoning)', async () => {
    const port = 47161;
    const down = await unconnectable(port);
    try {
      for (const [what, c, opts] of [
        ['client 500 ms', new SvcqClient({ url: `http://127.0.0.1:${port}`, timeoutMs: 500 }), {}],
        ['call 300 ms', new SvcqClient({ url: `http://127.0.0.1:${port}` }), { timeoutMs: 300 }],
        ['client 7 s', new SvcqClient({ url: `http://127.0.0.1:${port}`, timeoutMs: 7000 }), {}],
      ] as const) {
        const started = Date.now();
        const err = await failure(c.version(opts));
        const took = Date.now() - started;
        const allowed = (opts as { timeoutMs?: number }).timeoutMs ?? c.options.timeoutMs!;
        expect(err.code, what).to.equal('timeout');
        expect(err.sent, what).to.equal(false);
        expect(err.transient, what).to.equal(true);
        expect(took, what).to.be.within(allowed - 50, allowed + 1500);
        expect(err.message, what).to.equal(`cannot reach http://127.0.0.1:${port} (no connection within ${allowed < 1000 ? `${allowed} ms` : `${allowed / 1000} s`})`);
      }
      // A long poll's wait begins once the server has its request: setting up the connection is
      // allowed the time limit alone, not the wait as well.
      const polling = new SvcqClient({ url: `http://127.0.0.1:${port}`, host: HOST, timeoutMs: 500 });
      for (const [what, call] of [
        ['claim with wait 20', () => polling.claim('thumbnails', { worker: 'w', wait: 20 })],
        ['item with wait 20', () => polling.item('thumbnails', '0123456789abcdef', 20)],
      ] as Array<[string, () => Promise<unknown>]>) {
        const started = Date.now();
        const err = await failure(call());
        expect(err.code, what).to.equal('timeout');
        expect(Date.now() - started, what).to.be.within(450, 2000);
      }
      // No limit: still trying once the signal ends it, well past 4 s.
      const forever = new SvcqClient({ url: `http://127.0.0.1:${port}`, timeoutMs: 0 });
      const started = Date.now();
      const err = await failure(forever.version({ signal: AbortSignal.timeout(5000) }));
      expect(err.code).to.equal('aborted');
      expect(Date.now() - started).to.be.at.least(4900);
    } finally {
      down.close();
    }
  });
});
