import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { SvcqClient, retryAfterMs } from '../../src/client/client.js';

/**
 * The client library and its work loop (the one `svcq work` runs) against a server whose empty
 * claim answers carry `Retry-After` (decisions §8.5: the queue's rate limit held the claim back):
 * the next claim comes that long after, not after the usual short pause. A stand-in server answers
 * the claims, so that only the timing of the worker's claims is under test.
 */
describe('the work loop honours Retry-After on an empty claim (decisions §8.5)', function () {
  this.timeout(20_000);

  /** A server whose claims answer empty, each with the Retry-After `plan` gives for it (none: undefined); it notes when each came. */
  async function claimServer(plan: (n: number) => string | undefined): Promise<{ url: string; claims: number[]; close: () => Promise<void> }> {
    const claims: number[] = [];
    const server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const n = claims.push(Date.now()) - 1;
        const later = plan(n);
        res.writeHead(200, { 'content-type': 'application/json', ...(later === undefined ? {} : { 'retry-after': later }) });
        res.end('{"ok":true,"empty":true}');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}`, claims, close: () => new Promise((resolve) => server.close(() => resolve())) };
  }

  const until = async (check: () => boolean, ms: number): Promise<void> => {
    const deadline = Date.now() + ms;
    while (!check()) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  it('client.claim() reads Retry-After as retryAfterMs; an answer without one has none', async () => {
    const server = await claimServer((n) => (n === 0 ? '3' : undefined));
    try {
      const client = new SvcqClient({ url: server.url, host: 'jobs.test' });
      expect((await client.claim('q', { worker: 'w' })).retryAfterMs).to.equal(3000);
      expect((await client.claim('q', { worker: 'w' })).retryAfterMs).to.equal(undefined);
    } finally {
      await server.close();
    }
  });

  it('a Retry-After in seconds or as an HTTP date is read in ms; anything else is none', () => {
    const now = Date.parse('2026-11-29T00:00:00Z');
    expect(retryAfterMs('0', now)).to.equal(0);
    expect(retryAfterMs('12', now)).to.equal(12_000);
    expect(retryAfterMs('Sun, 29 Nov 2026 00:00:05 GMT', now)).to.equal(5000);
    expect(retryAfterMs('soon', now)).to.equal(undefined);
    expect(retryAfterMs(undefined, now)).to.equal(undefined);
  });

  it('client.work() with waitSeconds 0 claims again after Retry-After (2 s), where an empty answer without one is followed at once (its pause is under 1 s)', async () => {
    // Claims 0 and 1 empty without Retry-After, claim 2 with Retry-After: 2, the rest without.
    const server = await claimServer((n) => (n === 2 ? '2' : undefined));
    const client = new SvcqClient({ url: server.url, host: 'jobs.test' });
    const working = client.work('q', async () => ({}), { waitSeconds: 0, onEvent: () => undefined });
    try {
      await until(() => server.claims.length >= 4, 10_000);
      const [a, b, c, d] = server.claims as [number, number, number, number];
      expect(b - a, 'the usual pause').to.be.below(1000);
      expect(c - b, 'the usual pause').to.be.below(1000);
      expect(d - c, 'Retry-After: 2').to.be.within(1950, 3000);
    } finally {
      await working.stop();
      await server.close();
    }
  });
});
