import { execFileSync } from 'node:child_process';
import { expect } from 'chai';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS } from '../http/queue-api.js';

const HOST = 'full.example.com';

/** Mounts a tmpfs of `size` at `dir`; the reason it could not, or undefined. */
function mountTmpfs(dir: string, size: string): string | undefined {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
    return undefined;
  } catch (err) {
    return ((err as { stderr?: Buffer }).stderr?.toString().trim() || (err as Error).message).split('\n')[0];
  }
}

describe('a server whose disk fills up (decisions §6: a failed write leaves no trace)', function () {
  this.timeout(120_000);
  let mountPoint: string;
  let mounted = false;
  let server: TestServer | undefined;

  before(function () {
    mountPoint = tempDir('svcq-full-');
    const why = mountTmpfs(mountPoint, '2m');
    if (why !== undefined) {
      console.log(`      skipped: cannot mount a 2 MiB tmpfs here (${why})`);
      this.skip();
    }
    mounted = true;
  });
  after(async () => {
    await server?.kill9();
    if (mounted) execFileSync('umount', [mountPoint]);
    cleanupTemp(mountPoint);
  });

  it('answers 503 for what it cannot write, hands out and keeps only acknowledged items, serves again once space is back, and keeps it all across kill -9', async () => {
    server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] });
    await defineQueue(server, HOST, 'big', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    const call = (method: string, path: string, body?: unknown) => request(server!.url, path, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });

    const acked: string[] = [];
    const leasedWhileFull: string[] = [];
    let refusedPosts = 0;
    let refusedClaims = 0;
    const statuses = new Set<number>();
    const pad = 'x'.repeat(8000);
    for (let i = 0; i < 600 && refusedPosts < 40; i++) {
      const reply = await call('POST', '/big', { i, pad });
      statuses.add(reply.status);
      if (reply.status === 200) acked.push((reply.json as { id: string }).id);
      else {
        expect(reply.status, reply.text).to.equal(503);
        expect(reply.json).to.have.property('ok', false);
        expect((reply.json as { error: string }).error).to.match(/disk is full/);
        refusedPosts++;
        // A claim on the full disk: it either is written (and so counts) or leaves nothing leased.
        const claim = await call('POST', '/big/claim', { worker: 'while-full' });
        if (claim.status === 503) refusedClaims++;
        else if ((claim.json as { id?: string }).id) leasedWhileFull.push((claim.json as { id: string }).id);
      }
    }
    expect(refusedPosts, 'the disk never filled').to.be.greaterThan(0);
    expect([...statuses].sort()).to.deep.equal([200, 503]);
    expect(server.output()).to.match(/a write to the store failed/);

    // Space comes back; no restart.
    execFileSync('mount', ['-o', 'remount,size=64m', mountPoint]);
    let after: { status: number; json: unknown } | undefined;
    for (let tries = 0; tries < 50; tries++) {
      after = await call('POST', '/big', { after: true });
      if (after.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(after?.status, 'the server did not serve again once space was back').to.equal(200);
    acked.push((after!.json as { id: string }).id);

    // Every claim hands out an acknowledged item, and every acknowledged item is handed out once.
    const claimed: string[] = [...leasedWhileFull];
    for (;;) {
      const claim = await call('POST', '/big/claim', { worker: 'after' });
      expect(claim.status, claim.text).to.equal(200);
      const id = (claim.json as { id?: string }).id;
      if (!id) break;
      claimed.push(id);
    }
    expect(claimed.length, `${refusedClaims} claims were refused`).to.equal(acked.length);
    expect([...claimed].sort()).to.deep.equal([...acked].sort());
    for (const id of claimed) {
      const result = await call('POST', `/big/items/${id}/result`, { done: id });
      expect(result.status, result.text).to.equal(200);
      expect(result.json).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
    }

    await server.kill9();
    server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] });
    for (const id of acked) {
      const fetched = await call('GET', `/big/items/${id}`);
      expect(fetched.status, `${id} after kill -9`).to.equal(200);
      expect(fetched.json).to.deep.include({ status: 'finished', result: { done: id } });
    }
    expect((await call('POST', '/big/claim', {})).json).to.deep.equal({ ok: true, empty: true });
  });
});
