import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, closeSync, openSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { expect } from 'chai';
import { request } from '../support/http.js';
import { BIN, cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
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

/**
 * Unmounts `dir`, trying again for a while while it is busy (a process killed a moment ago may
 * still hold a file there), and lazily at last, so that no test leaves a mount behind.
 */
async function unmount(dir: string): Promise<void> {
  for (let tries = 0; tries < 20; tries++) {
    try {
      execFileSync('umount', [dir], { stdio: 'pipe' });
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
}

/**
 * A 2 MiB tmpfs for the calling describe (its tests skipped, with one line, where none can be
 * mounted), unmounted after them; `server` is the one a test last started on it, killed first.
 */
function smallDisk(): { mountPoint: string; server?: TestServer } {
  const disk: { mountPoint: string; server?: TestServer } = { mountPoint: '' };
  let mounted = false;
  before(function () {
    disk.mountPoint = tempDir('svcq-full-');
    const why = mountTmpfs(disk.mountPoint, '2m');
    if (why !== undefined) {
      console.log(`      skipped: cannot mount a 2 MiB tmpfs here (${why})`);
      this.skip();
    }
    mounted = true;
  });
  after(async () => {
    await disk.server?.kill9();
    if (mounted) await unmount(disk.mountPoint);
    cleanupTemp(disk.mountPoint);
  });
  return disk;
}

describe('a server whose disk fills up (decisions §6: a failed write leaves no trace)', function () {
  this.timeout(120_000);
  const disk = smallDisk();

  it('answers 503 for what it cannot write, hands out and keeps only acknowledged items, serves again once space is back, and keeps it all across kill -9', async () => {
    const { mountPoint } = disk;
    let server = (disk.server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] }));
    await defineQueue(server, HOST, 'big', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    const call = (method: string, path: string, body?: unknown) => request(server.url, path, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });

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

    // The access log lost the lines it could not write, but every line it holds is whole (decisions §5).
    await new Promise((r) => setTimeout(r, 300));
    const lines = readFileSync(`${mountPoint}/_svcq/logs/access.log`, 'utf8').split('\n').slice(0, -1);
    expect(lines.length).to.be.greaterThan(acked.length);
    for (const line of lines) expect(() => JSON.parse(line), `access log line ${line}`).to.not.throw();

    await server.kill9();
    server = disk.server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] });
    for (const id of acked) {
      const fetched = await call('GET', `/big/items/${id}`);
      expect(fetched.status, `${id} after kill -9`).to.equal(200);
      expect(fetched.json).to.deep.include({ status: 'finished', result: { done: id } });
    }
    expect((await call('POST', '/big/claim', {})).json).to.deep.equal({ ok: true, empty: true });
  });
});

describe('a full disk under hand-ins and batches (decisions §3.8, §6)', function () {
  this.timeout(120_000);
  const disk = smallDisk();

  it('a claim whose hand-ins cannot be written is a 503 and the server keeps serving (with and without wait); a batch whose write was cut short is gone after kill -9, not in part', async () => {
    const { mountPoint } = disk;
    let server = (disk.server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] }));
    await defineQueue(server, HOST, 'hand', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    const call = (method: string, path: string, body?: unknown) => request(server.url, path, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });

    const acked: string[] = [];
    for (let i = 0; i < 2; i++) acked.push(((await call('POST', '/hand', { i })).json as { id: string }).id);
    const leased = (await call('POST', '/hand/claim', { worker: 'w' })).json as { id: string };
    expect(leased.id).to.equal(acked[0]);

    // Room kept aside, freed just before the batch: its write then gets part of the way.
    const filler = `${mountPoint}/filler`;
    execFileSync('fallocate', ['-l', '256K', filler]);
    const pad = 'x'.repeat(8000);
    for (let i = 0; i < 600; i++) {
      const reply = await call('POST', '/hand', { i, pad });
      if (reply.status !== 200) break;
      acked.push((reply.json as { id: string }).id);
    }

    // The task history cannot take the events of the last posts either: its endpoints say so, at once.
    const started = Date.now();
    const tasks = await request(server.url, '/api/v2/tasks', { token: server.masterToken });
    expect(Date.now() - started, 'GET /api/v2/tasks waited for the disk').to.be.below(5000);
    expect(tasks.status, tasks.text).to.equal(503);
    expect((tasks.json as { error: string }).error).to.match(/task history could not be brought up to date \(its disk is full\)/);

    for (const wait of [0, 1]) {
      const claim = await call('POST', '/hand/claim', { worker: 'w', wait, done: [{ id: leased.id, result: { pad } }] });
      expect(claim.status, `wait ${wait}: ${claim.text}`).to.equal(503);
      expect(claim.json).to.have.property('ok', false);
      expect(server.proc.exitCode, `the server exited after a claim with wait ${wait}:\n${server.output()}`).to.equal(null);
      expect((await call('GET', `/hand/items/${leased.id}`)).json, 'the refused hand-in took no effect').to.deep.include({ status: 'claimed' });
    }

    execFileSync('rm', [filler]);
    const batch = Array.from({ length: 1000 }, (_, n) => ({ n, cut: 'batch-cut', pad: 'y'.repeat(1000) }));
    const refused = await call('POST', '/hand/batch', batch);
    expect(refused.status, refused.text).to.equal(503);
    // kill -9 before any other write could zero what the refused batch left on disk.
    await server.kill9();
    const journal = readdirSync(`${mountPoint}/_svcq/store`).find((f) => f.startsWith('journal-'))!;
    const left = readFileSync(`${mountPoint}/_svcq/store/${journal}`, 'latin1').split('batch-cut').length - 1;
    expect(left, 'the refused batch left none of its records on disk: this test would not show anything').to.be.greaterThan(10);

    execFileSync('mount', ['-o', 'remount,size=64m', mountPoint]);
    server = disk.server = await startServer({ root: mountPoint, args: ['--stats-interval', '3600000'] });
    expect(server.output()).to.match(/never finished/);
    const claimed: string[] = [];
    for (;;) {
      const claim = await call('POST', '/hand/claim', { worker: 'after', max: 100 });
      const items = (claim.json as { items: Array<{ id: string; item: { cut?: string } }> }).items;
      if (items.length === 0) break;
      for (const it of items) {
        expect(it.item.cut, 'an item of the refused batch came back').to.equal(undefined);
        claimed.push(it.id);
      }
    }
    expect(claimed.sort()).to.deep.equal(acked.filter((id) => id !== leased.id).sort());
    expect((await call('GET', `/hand/items/${leased.id}`)).json).to.deep.include({ status: 'claimed', attempts: 1 });
  });
});

describe('a server whose own stderr is on the disk that fills (decisions §6: it keeps serving)', function () {
  this.timeout(60_000);
  const disk = smallDisk();

  it('a warning it cannot write does not end it: it answers while the disk is full, serves again once space is back, and stops cleanly', async () => {
    const { mountPoint } = disk;
    const masterToken = 'master-test-token-0123456789abcdef';
    // `svcq serve > out.log 2> err.log` with both files on the disk that fills.
    const out = openSync(`${mountPoint}/out.log`, 'a');
    const err = openSync(`${mountPoint}/err.log`, 'a');
    const proc = spawn(process.execPath, [BIN, 'serve', '--root', `${mountPoint}/root`, '--port', '0', '--master-token', masterToken, '--stats-interval', '3600000'], { stdio: ['ignore', out, err] });
    closeSync(out);
    closeSync(err);
    const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
    try {
      let url = '';
      for (const until = Date.now() + 20_000; url === '' && proc.exitCode === null && Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
        url = /listening on (http:\/\/\S+)/.exec(readFileSync(`${mountPoint}/out.log`, 'utf8'))?.[1] ?? '';
      }
      expect(url, 'the server did not start').to.not.equal('');
      const server = { url, masterToken } as TestServer;
      await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS });
      const post = (n: number) => request(url, '/q', { method: 'POST', host: HOST, body: JSON.stringify({ n, pad: 'p'.repeat(4000) }) });

      // Fill what is left; the posts that follow fill the journal's zeros ahead, then get 503s, and
      // the access log's next write fails: each of these is a warning for stderr, which cannot take it.
      const filler = `${mountPoint}/filler`;
      try {
        execFileSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=64k'], { stdio: 'ignore' });
      } catch {
        // dd stops at the full disk with an error: that is the point.
      }
      const statuses = new Set<number>();
      for (let n = 0; n < 400 && !statuses.has(503); n++) statuses.add((await post(n)).status);
      expect([...statuses], 'the disk never filled').to.include(503);
      await new Promise((r) => setTimeout(r, 1500));
      expect(proc.exitCode, 'the server ended on a warning it could not write').to.equal(null);
      expect((await request(url, '/api/version', { token: masterToken })).status).to.equal(200);

      rmSync(filler);
      const after = await post(1000);
      expect(after.status, after.text).to.equal(200);
      proc.kill('SIGTERM');
      expect(await exited).to.equal(0);
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGKILL');
        await exited;
      }
    }
  });
});

describe('svcq work whose stdout is on the disk that fills (decisions §1.3: nothing it finished is lost)', function () {
  this.timeout(60_000);
  const disk = smallDisk();
  let server: TestServer | undefined;
  after(async () => {
    await server?.stop();
    if (server) cleanupTemp(server.root);
  });

  it('stops as on Ctrl-C: the job under way finishes and is handed in, nothing more is started, one sentence on stderr, exit 1', async () => {
    const { mountPoint } = disk;
    server = await startServer({ args: ['--stats-interval', '3600000'] });
    await defineQueue(server, HOST, 'w', { access: PUBLIC_ACCESS, leaseSeconds: 300 });
    const url = server.url;
    const ids: string[] = [];
    for (let n = 0; n < 5; n++) ids.push(((await request(url, '/w', { method: 'POST', host: HOST, body: JSON.stringify({ n }) })).json as { id: string }).id);
    const status = async (id: string) => ((await request(url, `/w/items/${id}`, { host: HOST })).json as { status: string }).status;

    // `svcq work … >> out.log`, out.log on the disk that fills.
    const outFile = `${mountPoint}/out.log`;
    const out = openSync(outFile, 'a');
    const proc = spawn(process.execPath, [BIN, 'work', 'w', '--host', HOST, '--url', url, '--exec', 'sleep 1; cat'], { stdio: ['ignore', out, 'pipe'] });
    closeSync(out);
    let stderr = '';
    proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
    try {
      for (const until = Date.now() + 10_000; (await status(ids[0]!)) !== 'claimed' && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
      expect(await status(ids[0]!), 'the worker never claimed the first item').to.equal('claimed');
      try {
        execFileSync('dd', ['if=/dev/zero', `of=${mountPoint}/filler`, 'bs=64k'], { stdio: 'ignore' });
      } catch {
        // dd stops at the full disk with an error: that is the point.
      }
      // The last page of out.log too: the worker's next line has nowhere to go.
      try {
        for (;;) appendFileSync(outFile, ' '.repeat(512));
      } catch {
        // full
      }
      expect(await exited, stderr).to.equal(1);
      expect(stderr).to.match(/svcq: the worker stopped: its output could not be written \(ENOSPC/);
      expect(stderr).to.not.match(/\s+at .*:\d+:\d+/);
      const after = await Promise.all(ids.map(status));
      expect(after[0], 'the job under way was handed in').to.equal('finished');
      expect(after.filter((s) => s === 'claimed'), 'no item is left leased to the stopped worker').to.deep.equal([]);
      expect(after.filter((s) => s === 'pending').length, 'nothing more was started').to.be.at.least(2);
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGKILL');
        await exited;
      }
    }
  });
});
