import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { runCli, type CliResult } from '../support/cli.js';
import { request } from '../support/http.js';
import { BIN, cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';

/**
 * `svcq sync`, `svcq manifest`, `svcq version` against a spawned server (interface, synchronisation
 * flow; decisions §1.2, §7). Each test has its own server, root and definitions folder.
 */

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

function write(dir: string, rel: string, text: string | Buffer): void {
  mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
  writeFileSync(path.join(dir, rel), text);
}

describe('svcq sync, manifest and version (CLI against a real server)', () => {
  let server: TestServer;
  let dir: string;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });
  beforeEach(async () => {
    dir = tempDir('svcq-defs-');
    // Each test starts from an empty server: whatever an earlier test stored is removed.
    const stored = (await request(server.url, '/api/v2/manifest', { token: server.masterToken })).json as Record<string, string>;
    for (const p of Object.keys(stored)) await request(server.url, `/api/v2/def?path=${encodeURIComponent(p)}`, { method: 'DELETE', token: server.masterToken });
  });
  afterEach(() => cleanupTemp(dir));

  const env = (): Record<string, string> => ({ SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken });
  const svcq = (...args: string[]): Promise<CliResult> => runCli(args, { env: env() });
  const manifest = async (): Promise<Record<string, string>> => (await request(server.url, '/api/v2/manifest', { token: server.masterToken })).json as Record<string, string>;

  it('follows symbolic links to host folders and definition files, and deletes nothing they hold (synchronisation flow step 1)', async () => {
    const real = tempDir('svcq-real-');
    try {
      write(real, 'linked.example.com/svc-queues/q.json', '{"leaseSeconds": 5}');
      write(real, 'files/q2.json', '{"leaseSeconds": 6}');
      symlinkSync(path.join(real, 'linked.example.com'), path.join(dir, 'linked.example.com'));
      mkdirSync(path.join(dir, 'jobs.example.com/svc-queues'), { recursive: true });
      symlinkSync(path.join(real, 'files/q2.json'), path.join(dir, 'jobs.example.com/svc-queues/q2.json'));
      const first = await svcq('sync', dir, '--json');
      expect(first.code, first.stderr).to.equal(0);
      expect(Object.keys(await manifest()).sort()).to.deep.equal(['jobs.example.com/svc-queues/q2.json', 'linked.example.com/svc-queues/q.json']);
      const second = await svcq('sync', dir, '--json');
      expect(JSON.parse(second.stdout)).to.include({ unchanged: 2 });
      expect((JSON.parse(second.stdout) as { deleted: string[] }).deleted).to.deep.equal([]);
    } finally {
      cleanupTemp(real);
    }
  });

  it('puts every new file, and a second run changes nothing: 0 put, 0 deleted, all unchanged (synchronisation flow steps 3, 4, 6)', async () => {
    const queue = ' {"leaseSeconds": 30,\n\t"access": {"post": ["alice"]}}\r\n';
    const user = JSON.stringify({ 'svc-user-name': 'alice', tokenSha256: sha256('t') });
    write(dir, 'jobs.example.com/svc-queues/thumbs.json', queue);
    write(dir, 'jobs.example.com/svc-users/alice.json', user);
    write(dir, '10.1.2.3/svc-queues/other.json', '{}');

    const first = await svcq('sync', dir);
    expect(first.code, first.stderr).to.equal(0);
    expect(first.stdout).to.include('3 put, 0 deleted, 0 unchanged');
    expect(await manifest()).to.deep.equal({
      '10.1.2.3/svc-queues/other.json': sha256('{}'),
      'jobs.example.com/svc-queues/thumbs.json': sha256(queue),
      'jobs.example.com/svc-users/alice.json': sha256(user),
    });

    // What the server was sent, not only what sync says: no PUT at all the second time (access log, decisions §5).
    const puts = async (): Promise<number> => {
      // Access lines are written every 100 ms.
      await new Promise((r) => setTimeout(r, 300));
      const log = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken });
      return log.text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { method: string; path: string })
        .filter((l) => l.method === 'PUT' && l.path === '/api/v2/def').length;
    };
    const before = await puts();
    const second = await svcq('sync', dir, '--json');
    expect(second.code, second.stderr).to.equal(0);
    expect(JSON.parse(second.stdout)).to.deep.equal({ put: [], deleted: [], unchanged: 3, dryRun: false });
    expect(await puts()).to.equal(before);
  });

  it('puts a changed file again and deletes a stored definition that has no local file (synchronisation flow steps 4, 5)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{"leaseSeconds":5}');
    write(dir, 'h.example.com/svc-queues/b.json', '{}');
    write(dir, 'h.example.com/svc-queues/c.json', '{}');
    expect((await svcq('sync', dir)).code).to.equal(0);

    write(dir, 'h.example.com/svc-queues/a.json', '{"leaseSeconds":6}');
    rmSync(path.join(dir, 'h.example.com/svc-queues/b.json'));
    const run = await svcq('sync', dir, '--json');
    expect(run.code, run.stderr).to.equal(0);
    expect(JSON.parse(run.stdout)).to.deep.equal({ put: ['h.example.com/svc-queues/a.json'], deleted: ['h.example.com/svc-queues/b.json'], unchanged: 1, dryRun: false });
    expect(await manifest()).to.deep.equal({
      'h.example.com/svc-queues/a.json': sha256('{"leaseSeconds":6}'),
      'h.example.com/svc-queues/c.json': sha256('{}'),
    });
  });

  it('--dry-run says what would be created, updated and deleted, in the conditional, and changes nothing; with --json the same as wouldCreate, wouldUpdate, wouldDelete and dryRun: true, beside put and deleted as a sync reports them (scripts written against them keep working)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{"leaseSeconds":5}');
    write(dir, 'h.example.com/svc-queues/b.json', '{}');
    write(dir, 'h.example.com/svc-queues/c.json', '{}');
    expect((await svcq('sync', dir)).code).to.equal(0);
    const stored = await manifest();

    write(dir, 'h.example.com/svc-queues/a.json', '{"leaseSeconds":6}');
    rmSync(path.join(dir, 'h.example.com/svc-queues/b.json'));
    write(dir, 'h.example.com/svc-users/u.json', JSON.stringify({ 'svc-user-name': 'u', tokenSha256: sha256('x') }));
    const run = await svcq('sync', dir, '--dry-run');
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout).to.equal(
      [
        'would create h.example.com/svc-users/u.json',
        'would update h.example.com/svc-queues/a.json',
        'would delete h.example.com/svc-queues/b.json',
        'dry run, nothing changed: would create 1, update 1 and delete 1; 1 unchanged',
        '',
      ].join('\n'),
    );
    expect(run.stdout).to.not.match(/\b(put|deleted)\b/);
    const json = await svcq('sync', dir, '--dry-run', '--json');
    expect(json.code, json.stderr).to.equal(0);
    expect(JSON.parse(json.stdout)).to.deep.equal({
      dryRun: true,
      put: ['h.example.com/svc-queues/a.json', 'h.example.com/svc-users/u.json'],
      deleted: ['h.example.com/svc-queues/b.json'],
      wouldCreate: ['h.example.com/svc-users/u.json'],
      wouldUpdate: ['h.example.com/svc-queues/a.json'],
      wouldDelete: ['h.example.com/svc-queues/b.json'],
      unchanged: 1,
    });
    expect(await manifest(), 'a dry run changes nothing').to.deep.equal(stored);
  });

  it('deletes or replaces a stored definition the server could not read (a file edited by hand): the manifest lists every stored definition (interface §4.5, synchronisation flow step 5)', async function () {
    this.timeout(30_000);
    const own = await startServer();
    try {
      const stored = path.join(own.root, 'h.example.com/svc-queues');
      await own.stop();
      write(own.root, 'h.example.com/svc-queues/handmade.json', '{"bogus":true}');
      write(own.root, 'h.example.com/svc-queues/fixed.json', '{"leaseSeconds":"soon"}');
      const again = await startServer({ root: own.root });
      try {
        expect(again.output()).to.match(/skipping stored definition h\.example\.com\/svc-queues\/handmade\.json: unknown field "bogus"/);
        write(dir, 'h.example.com/svc-queues/fixed.json', '{"leaseSeconds":5}');
        const run = await runCli(['sync', dir, '--json'], { env: { SVCQ_URL: again.url, SVCQ_TOKEN: again.masterToken } });
        expect(run.code, run.stderr).to.equal(0);
        expect(JSON.parse(run.stdout)).to.deep.equal({ put: ['h.example.com/svc-queues/fixed.json'], deleted: ['h.example.com/svc-queues/handmade.json'], unchanged: 0, dryRun: false });
        expect(readdirSync(stored)).to.deep.equal(['fixed.json']);
        expect((await request(again.url, '/api/v2/manifest', { token: again.masterToken })).json).to.deep.equal({ 'h.example.com/svc-queues/fixed.json': sha256('{"leaseSeconds":5}') });
      } finally {
        await again.stop();
      }
    } finally {
      cleanupTemp(own.root);
    }
  });

  it('deletes nothing when a definition file, a definition folder or a host folder is a link that leads nowhere: it is named as unreadable and nothing changes (synchronisation flow step 2, decisions §7)', async () => {
    write(dir, 'a.example.com/svc-queues/kept.json', '{}');
    write(dir, 'a.example.com/svc-queues/linked.json', '{}');
    write(dir, 'b.example.com/svc-queues/q.json', '{}');
    write(dir, 'c.example.com/svc-users/u.json', JSON.stringify({ 'svc-user-name': 'u', tokenSha256: sha256('x') }));
    expect((await svcq('sync', dir)).code).to.equal(0);
    const before = await manifest();

    // Links into a checkout or a volume that is not there (yet): what they held is unknown.
    rmSync(path.join(dir, 'a.example.com/svc-queues/linked.json'));
    symlinkSync(path.join(dir, 'missing/linked.json'), path.join(dir, 'a.example.com/svc-queues/linked.json'));
    rmSync(path.join(dir, 'b.example.com/svc-queues'), { recursive: true });
    symlinkSync(path.join(dir, 'missing/queues'), path.join(dir, 'b.example.com/svc-queues'));
    rmSync(path.join(dir, 'c.example.com'), { recursive: true });
    symlinkSync(path.join(dir, 'missing/c.example.com'), path.join(dir, 'c.example.com'));
    write(dir, 'a.example.com/svc-queues/new.json', '{}');

    for (const args of [['sync', dir], ['sync', dir, '--dry-run']]) {
      const run = await svcq(...args);
      expect(run.code, run.stdout).to.equal(1);
      expect(run.stdout).to.equal('');
      expect(run.stderr).to.include('a.example.com/svc-queues/linked.json: a symbolic link that leads nowhere');
      expect(run.stderr).to.include('b.example.com/svc-queues: cannot read the folder (not found)');
      expect(run.stderr).to.include('c.example.com: a symbolic link that leads nowhere');
      expect(run.stderr).to.include('nothing uploaded');
    }
    expect(await manifest()).to.deep.equal(before);
  });

  it('a PUT the server fails part way: says what was put and what is left, deletes nothing, and a second run finishes (decisions §1.2, interface §7)', async () => {
    write(dir, 'h.example.com/svc-queues/gone.json', '{}');
    expect((await svcq('sync', dir)).code).to.equal(0);
    rmSync(path.join(dir, 'h.example.com/svc-queues/gone.json'));
    for (let n = 0; n < 12; n++) write(dir, `h.example.com/svc-queues/q${n}.json`, '{}');
    // A folder where the server would write this one's file: its PUT fails with 500, the others go through.
    write(dir, 'h.example.com/svc-queues/blocked.json', '{}');
    mkdirSync(path.join(server.root, 'h.example.com/svc-queues/blocked.json'), { recursive: true });
    try {
      const [run, json] = [await svcq('sync', dir), await svcq('sync', dir, '--json')];
      expect(run.code).to.equal(1);
      const stored = Object.keys(await manifest()).sort();
      expect(stored).to.include('h.example.com/svc-queues/gone.json');
      const putLines = run.stdout.split('\n').filter(Boolean);
      expect(putLines.length).to.be.greaterThan(0);
      for (const line of putLines) expect(stored).to.include(line.replace(/^put /, ''));
      expect(run.stderr).to.match(/^svcq: h\.example\.com\/svc-queues\/blocked\.json: the server could not write the definition file; \d+ put and 0 deleted before it stopped, \d+ still to put and 1 to delete \(run svcq sync again to finish\)\n$/);
      expect(run.stderr).to.include(`; ${putLines.length} put and 0 deleted`);
      expect(json.code).to.equal(1);
      expect(json.stdout).to.equal('');
      const out = JSON.parse(json.stderr) as { error: string; put: string[]; deleted: string[]; notPut: string[]; notDeleted: string[] };
      expect(out.notPut).to.include('h.example.com/svc-queues/blocked.json');
      expect(out.notDeleted).to.deep.equal(['h.example.com/svc-queues/gone.json']);
    } finally {
      rmSync(path.join(server.root, 'h.example.com/svc-queues/blocked.json'), { recursive: true });
    }
    const again = await svcq('sync', dir, '--json');
    expect(again.code, again.stderr).to.equal(0);
    expect(Object.keys(await manifest()).sort()).to.deep.equal(readdirSync(path.join(dir, 'h.example.com/svc-queues')).map((f) => `h.example.com/svc-queues/${f}`).sort());
  });

  it('a PUT sent that gets no answer is named as maybe applied, not only as still to put; a second run finishes (decisions §1.2)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{}');
    write(dir, 'h.example.com/svc-queues/cut.json', '{"leaseSeconds":30}');
    // In front of the server: the PUT of cut.json reaches it, and its answer is cut off.
    const proxy = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => {
        const up = http.request(`${server.url}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
          if (req.url?.includes('cut.json')) {
            r.resume();
            r.on('end', () => req.socket.destroy());
            return;
          }
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        });
        up.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      const env = { SVCQ_URL: url, SVCQ_TOKEN: server.masterToken };
      const run = await runCli(['sync', dir], { env });
      expect(run.code).to.equal(1);
      // The server did apply it: the client cannot know that, and says it may have.
      expect(Object.keys(await manifest())).to.include('h.example.com/svc-queues/cut.json');
      expect(run.stderr).to.match(/, 1 still to put and 0 to delete, 1 of them sent without an answer \(the server may have applied it\) \(run svcq sync again to finish\)\n$/);
      const json = await runCli(['sync', dir, '--json'], { env });
      // By now the server holds cut.json as it is here: nothing is left to put, and the run passes.
      expect(json.code, json.stderr).to.equal(0);
    } finally {
      proxy.close();
    }
  });

  it('Ctrl-C part way starts nothing more, says what was put and what is left, and exits 130 (decisions §1.2)', async () => {
    for (let n = 0; n < 40; n++) write(dir, `h.example.com/svc-queues/q${n}.json`, '{}');
    // In front of the server: each PUT is answered 100 ms late, so the sync is still going when the signal comes.
    let answered = 0;
    const proxy = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => {
        const forward = (): void => {
          const up = http.request(`${server.url}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
            res.writeHead(r.statusCode ?? 502, r.headers);
            r.pipe(res);
            if (req.method === 'PUT') answered++;
          });
          up.end(Buffer.concat(chunks));
        };
        if (req.method === 'PUT') setTimeout(forward, 100);
        else forward();
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      const proc = spawn(process.execPath, [BIN, 'sync', dir], { env: { ...process.env, SVCQ_URL: url, SVCQ_TOKEN: server.masterToken } });
      let stdout = '';
      let stderr = '';
      proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
      while (answered < 8) await new Promise((r) => setTimeout(r, 10));
      proc.kill('SIGINT');
      expect(await exited).to.equal(130);
      const stored = Object.keys(await manifest()).sort();
      expect(stored.length).to.be.within(8, 39);
      expect(stdout.split('\n').filter(Boolean).map((l) => l.replace(/^put /, '')).sort()).to.deep.equal(stored);
      expect(stderr).to.equal(`svcq: interrupted; ${stored.length} put and 0 deleted before it stopped, ${40 - stored.length} still to put and 0 to delete (run svcq sync again to finish)\n`);
    } finally {
      proxy.close();
    }
    const again = await svcq('sync', dir, '--json');
    expect(again.code, again.stderr).to.equal(0);
    expect(Object.keys(await manifest())).to.have.length(40);
  });

  it('only syncs <host>/svc-queues/*.json and <host>/svc-users/*.json (synchronisation flow step 1)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{}');
    write(dir, 'h.example.com/svc-queues/notes.txt', 'not a definition');
    write(dir, 'h.example.com/other/x.json', '{"anything":1}');
    write(dir, 'README.json', '{"anything":1}');
    const run = await svcq('sync', dir, '--json');
    expect(run.code, run.stderr).to.equal(0);
    expect(JSON.parse(run.stdout).put).to.deep.equal(['h.example.com/svc-queues/a.json']);
    expect(Object.keys(await manifest())).to.deep.equal(['h.example.com/svc-queues/a.json']);
  });

  it('uploads and deletes nothing when one file is bad, and names every bad file with its reason (synchronisation flow step 2, decisions §7)', async () => {
    write(dir, 'h.example.com/svc-queues/kept.json', '{}');
    write(dir, 'h.example.com/svc-queues/doomed.json', '{}');
    expect((await svcq('sync', dir)).code).to.equal(0);
    const before = await manifest();

    rmSync(path.join(dir, 'h.example.com/svc-queues/doomed.json'));
    write(dir, 'h.example.com/svc-queues/kept.json', '{"leaseSeconds":9}');
    write(dir, 'h.example.com/svc-queues/new.json', '{}');
    write(dir, 'h.example.com/svc-queues/typo.json', '{"leaseSecs":9}');
    write(dir, 'h.example.com/svc-users/bob.json', JSON.stringify({ 'svc-user-name': 'robert', tokenSha256: sha256('x') }));
    write(dir, 'h.example.com/svc-queues/Upper.json', '{}');
    const [run, json] = await Promise.all([svcq('sync', dir), svcq('sync', dir, '--json')]);
    expect(run.code).to.equal(1);
    expect(run.stderr).to.include('h.example.com/svc-queues/typo.json: unknown field "leaseSecs"');
    expect(run.stderr).to.include('h.example.com/svc-users/bob.json: svc-user-name "robert" must equal the file name "bob"');
    expect(run.stderr).to.include('"Upper" is not a valid name');
    expect(run.stderr).to.include('nothing uploaded: 3 definitions did not validate');
    expect(run.stderr).to.not.match(/\s+at .*:\d+:\d+/);
    expect(json.code).to.equal(1);
    expect(json.stdout).to.equal('');
    const out = JSON.parse(json.stderr) as { error: string; invalid: Array<{ path: string; error: string }> };
    expect(out.invalid.map((i) => i.path).sort()).to.deep.equal(['h.example.com/svc-queues/Upper.json', 'h.example.com/svc-queues/typo.json', 'h.example.com/svc-users/bob.json']);
    expect(await manifest()).to.deep.equal(before);
  });

  it('names a file that is not UTF-8 text as bad and uploads nothing, as the server would refuse it (synchronisation flow step 2, RFC 8259 §8.1)', async () => {
    const before = await manifest();
    write(dir, 'h.example.com/svc-queues/fine.json', '{}');
    write(dir, 'h.example.com/svc-queues/latin1.json', Buffer.from('{"schema":{"type":"object","description":"caf\xe9"}}', 'latin1'));
    const run = await svcq('sync', dir);
    expect(run.code).to.equal(1);
    expect(run.stderr).to.include('h.example.com/svc-queues/latin1.json: not UTF-8 text');
    expect(await manifest()).to.deep.equal(before);
    rmSync(path.join(dir, 'h.example.com/svc-queues/latin1.json'));
  });

  it('reports every problem of every bad file, one line each with file and field, and uploads nothing (synchronisation flow step 2)', async () => {
    write(dir, 'h.example.com/svc-queues/x.json', '{"leaseSeconds":0,"maxAttempts":0}');
    write(dir, 'h.example.com/svc-queues/y.json', '{"retainFrom":"posted","leaseSecs":5}');
    const [run, json] = await Promise.all([svcq('sync', dir), svcq('sync', dir, '--json')]);
    expect(run.code).to.equal(1);
    const lines = run.stderr.trim().split('\n');
    expect(lines).to.include('svcq: h.example.com/svc-queues/x.json: leaseSeconds must be an integer from 1 to 86400 (got 0)');
    expect(lines).to.include('svcq: h.example.com/svc-queues/x.json: maxAttempts must be an integer from 1 to 1000 (got 0)');
    expect(lines).to.include('svcq: h.example.com/svc-queues/y.json: retainFrom must be "finished" or "fetched" (got "posted")');
    expect(lines).to.include('svcq: h.example.com/svc-queues/y.json: unknown field "leaseSecs"');
    expect(lines.at(-1)).to.equal('svcq: nothing uploaded: 2 definitions did not validate');
    const out = JSON.parse(json.stderr) as { invalid: Array<{ path: string; error: string; problems: string[] }> };
    const x = out.invalid.find((i) => i.path === 'h.example.com/svc-queues/x.json')!;
    expect(x.problems).to.have.length(2);
    expect(x.error).to.match(/^h\.example\.com\/svc-queues\/x\.json: leaseSeconds must be .*; maxAttempts must be /);
    expect(await manifest()).to.deep.equal({});
  });

  it('says "not found (wrong token, host or queue?)" and exits non-zero on the wall (decisions §1.2)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{}');
    const commands = [['sync', dir], ['manifest'], ['version']];
    const runs = await Promise.all(commands.map((args) => runCli([...args, '--token', 'wrong-token'], { env: { SVCQ_URL: server.url } })));
    runs.forEach((run, i) => {
      expect(run.code, commands[i]!.join(' ')).to.not.equal(0);
      expect(run.stderr.trim()).to.equal('svcq: not found (wrong token, host or queue?)');
    });
    expect(await manifest()).to.deep.equal({});
  });

  it('says when the folder does not exist, and exits non-zero', async () => {
    const run = await svcq('sync', path.join(dir, 'missing'));
    expect(run.code).to.not.equal(0);
    expect(run.stderr).to.include('is not a folder');
  });

  it('svcq manifest prints "<sha256>  <path>" lines, and --json the manifest object (decisions §1.2, §7)', async () => {
    write(dir, 'h.example.com/svc-queues/a.json', '{"leaseSeconds":7}');
    expect((await svcq('sync', dir)).code).to.equal(0);
    const [text, json] = await Promise.all([svcq('manifest'), svcq('manifest', '--json')]);
    expect(text.code).to.equal(0);
    expect(text.stdout.trim()).to.equal(`${sha256('{"leaseSeconds":7}')}  h.example.com/svc-queues/a.json`);
    expect(JSON.parse(json.stdout)).to.deep.equal(await manifest());
  });

  it("svcq version prints the client's and the server's API version (decisions §1.2, interface §9)", async () => {
    const [text, json] = await Promise.all([svcq('version'), svcq('version', '--json')]);
    expect(text.code, text.stderr).to.equal(0);
    expect(text.stdout).to.match(/api 2.*server api 2/);
    expect(JSON.parse(json.stdout)).to.deep.include({ api: 2, server: { api: 2 } });
  });
});

describe('the client against a server of another API version (interface §9)', () => {
  let other: http.Server;
  let url: string;
  const seen: string[] = [];
  before(async () => {
    // A server that speaks /api/v3 answers the v2 prefix with 426, as ours does for v<n≠2>.
    other = http.createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(426, { 'content-type': 'application/json' });
      res.end('{"error":"this server speaks /api/v3","api":3}');
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => other.close(() => resolve())));

  it('fails fast on 426 with "server speaks another API version" and uploads nothing', async () => {
    const dir = tempDir('svcq-defs-');
    try {
      write(dir, 'h.example.com/svc-queues/a.json', '{}');
      const runs = await Promise.all([['sync', dir], ['manifest']].map((args) => runCli([...args, '--url', url, '--token', 't'])));
      for (const run of runs) {
        expect(run.code).to.not.equal(0);
        expect(run.stderr).to.include('the server speaks another API version');
        expect(run.stderr).to.include('/api/v3');
      }
      expect(seen).to.deep.equal(['GET /api/v2/manifest', 'GET /api/v2/manifest']);
    } finally {
      cleanupTemp(dir);
    }
  });
});
