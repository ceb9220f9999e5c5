import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { ClientError, SvcqClient } from '../../src/client/index.js';
import { markedBlocks, normalise, runBlocks, type Block } from '../docs/doc-blocks.js';
import { defineQueue, defineUser } from '../http/queue-api.js';
import { BIN, cleanupTemp, REPO, startServer, tempDir, type TestServer } from '../support/server.js';
import { silentServer } from '../support/silent-server.js';

const HOST = 'jobs.example.com';
const TOKEN = 'resizer-token-0123456789abcdef0123';

/** A project of a user's own with svcq installed (linked, as npm links a local package). */
function userProject(): string {
  const dir = tempDir('svcq-client-');
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'my-producer', private: true, type: 'module' }));
  mkdirSync(path.join(dir, 'node_modules'));
  symlinkSync(REPO, path.join(dir, 'node_modules', 'svcq'), 'dir');
  return dir;
}

describe('the client library, imported as svcq/client (issue: "the client library exposes all three"; decisions §3.8)', function () {
  // The type-check of the example program alone took over a minute on a loaded 2-core machine.
  this.timeout(180_000);
  let server: TestServer;
  let project: string;

  before(async () => {
    server = await startServer();
    await defineUser(server, HOST, 'resizer', TOKEN);
    await defineQueue(server, HOST, 'thumbnails', { access: { post: ['resizer'], fetch: ['resizer'], work: ['resizer'] } });
    project = userProject();
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
    cleanupTemp(project);
  });

  it('the set-up, the producer, the worker and client.work() of docs/client.md run as shown, from a project that installed svcq, against a server of their own', async () => {
    const blocks = markedBlocks(readFileSync(path.join(REPO, 'docs/client.md'), 'utf8'), 'client');
    expect(blocks.map((b) => b.kind)).to.deep.equal(['run', 'node', 'node', 'node']);
    // The server the README starts, with its master token in its file: nothing defined yet.
    const own = await startServer();
    try {
      const tokenFile = path.join(project, 'master-token');
      writeFileSync(tokenFile, `${own.masterToken}\n`);
      // The only changes to what a reader pastes: the built binary for `npx svcq`, and the token file's place.
      const adapted = blocks.map((b): Block => ({ ...b, code: b.code.replaceAll('npx svcq', `"${process.execPath}" "${BIN}"`).replaceAll('/path/to/svcq/data/_svcq/master-token', tokenFile) }));
      const env: NodeJS.ProcessEnv = { ...process.env, SVCQ_URL: own.url };
      delete env.SVCQ_TOKEN;
      const run = await runBlocks(adapted, { cwd: project, env, dir: project, name: 'client' });
      expect(run.code, run.stderr).to.equal(0);
      blocks.forEach((b, i) => expect(normalise(run.perBlock[i]!), b.code).to.equal(normalise(b.prints!)));
    } finally {
      await own.stop();
      cleanupTemp(own.root);
    }
  });

  it('type-checks a TypeScript program against the declarations it ships, and refuses one that misuses them', () => {
    const good = `import { SvcqClient, ClientError, type ClaimManyAnswer, type StatusAnswer } from 'svcq/client';
const c = new SvcqClient({ url: 'http://127.0.0.1:8080', host: 'jobs.example.com', timeoutMs: 5000 });
const posted: { id: string } = await c.post('q', { n: 1 }, 'key-1');
const many: ClaimManyAnswer = await c.claim('q', { worker: 'w', max: 10, done: [{ id: posted.id, result: { ok: true } }] });
for (const item of many.items) console.log(item.id, item.item, item.lease.until);
const one = await c.claim('q', { worker: 'w' });
if (!one.empty) console.log(one.id, one.attempts);
const status: StatusAnswer = await c.item('q', posted.id, 5, { signal: AbortSignal.timeout(10_000) });
try { await c.cancel('q', status.id); } catch (err) { if (err instanceof ClientError && err.code === 'wall') console.log(err.transient, err.sent); }
`;
    const bad = `import { SvcqClient } from 'svcq/client';
const c = new SvcqClient({ url: 'http://127.0.0.1:8080' });
const n: number = (await c.post('q', { n: 1 })).id;
`;
    // Both programs in one compilation (a run of the compiler over the declarations and Node's
    // types takes some 10 s of CPU on a loaded 2-core machine): the one error is the bad one's,
    // none in the good one nor in the declarations (skipLibCheck off).
    writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, noEmit: true, skipLibCheck: false, typeRoots: [path.join(REPO, 'node_modules/@types')], types: ['node'] }, files: ['good.ts', 'bad.ts'] }));
    const tsc = path.join(REPO, 'node_modules/typescript/bin/tsc');
    writeFileSync(path.join(project, 'good.ts'), good);
    writeFileSync(path.join(project, 'bad.ts'), bad);
    const checked = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
    expect(checked.status).to.not.equal(0);
    const errors = checked.stdout.split('\n').filter((line) => / error TS\d+/.test(line));
    expect(errors, checked.stdout + checked.stderr).to.have.length(1);
    expect(errors[0]).to.match(/(^|\/)bad\.ts\(3,7\): error TS2322: Type 'string' is not assignable to type 'number'/);
  });

  it('a call to a server that never answers fails with code timeout after the client\'s timeoutMs, on every call (none waits for ever)', async () => {
    const silent = await silentServer();
    try {
      const c = new SvcqClient({ url: silent.url, host: HOST, timeoutMs: 300 });
      const calls: Array<[string, () => Promise<unknown>]> = [
        ['version', () => c.version()],
        ['manifest', () => c.manifest()],
        ['post', () => c.post('q', { n: 1 })],
        ['item', () => c.item('q', '0123456789abcdef')],
        ['claim', () => c.claim('q', { worker: 'w' })],
        ['submit', () => c.submit('q', '0123456789abcdef', 'result', { ok: true })],
        ['cancel', () => c.cancel('q', '0123456789abcdef')],
      ];
      for (const [name, call] of calls) {
        const started = Date.now();
        const err = await call().then(() => undefined, (e: unknown) => e);
        expect(err, name).to.be.instanceOf(ClientError);
        expect((err as ClientError).code, name).to.equal('timeout');
        expect((err as ClientError).transient, name).to.equal(true);
        expect(Date.now() - started, name).to.be.below(5_000);
      }
    } finally {
      await silent.close();
    }
  });

  it('a time limit counts from the end of the wait a call asked for, the call\'s own as the client\'s; an unset one leaves the default (docs/client.md)', async () => {
    const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN, timeoutMs: 500 });
    // An empty queue: the server holds each claim for its wait (1 s), past either limit of 500 ms.
    for (const opts of [{}, { timeoutMs: 500 }, { timeoutMs: undefined }]) {
      const answer = await c.claim('thumbnails', { worker: 'w', wait: 1, criteria: { never: 'matches' } }, opts);
      expect(answer.empty, JSON.stringify(opts)).to.equal(true);
    }
    const held = (await c.post('thumbnails', { n: 'held' })).id;
    expect((await c.item('thumbnails', held, 1, { timeoutMs: undefined })).status).to.equal('pending');
    expect((await c.cancel('thumbnails', held)).status).to.equal('cancelled');
  });

  it('post and postBatch send delay, at, priority and group as the post\'s options, and a bad one is rejected naming it (decisions §8.1, docs/client.md)', async () => {
    const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
    const first = await c.post('thumbnails', { n: 'later' }, undefined, { delay: 600, priority: 3, group: 'g 1' });
    const record = await c.item('thumbnails', first.id);
    expect(record).to.deep.include({ priority: 3, group: 'g 1', runAt: record.postedAt + 600_000 });
    const at = Date.now() + 3_600_000;
    const batch = await c.postBatch('thumbnails', [{ n: 1 }, { n: 2 }], undefined, { at, priority: -2 });
    for (const entry of batch.items) expect(await c.item('thumbnails', (entry as { id: string }).id)).to.deep.include({ priority: -2, runAt: at, group: null });
    const err = await c.post('thumbnails', { n: 1 }, undefined, { priority: 1000 }).then(() => undefined, (e: unknown) => e);
    expect(err).to.be.instanceOf(ClientError);
    expect((err as ClientError).code).to.equal('rejected');
    expect((err as ClientError).message).to.match(/\?priority|priority/);
    for (const id of [first.id, ...batch.items.map((e) => (e as { id: string }).id)]) await c.cancel('thumbnails', id);
  });

  it('an abandoned long poll fails with code aborted, which is not transient (a retry loop does not retry the caller\'s own choice)', async () => {
    const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
    const err = await c.claim('thumbnails', { worker: 'w', wait: 30, criteria: { never: 'matches' } }, { signal: AbortSignal.timeout(300) }).then(() => undefined, (e: unknown) => e);
    expect(err).to.be.instanceOf(ClientError);
    expect((err as ClientError).code).to.equal('aborted');
    expect((err as ClientError).transient).to.equal(false);
    expect((err as ClientError).message).to.match(/^the request was abandoned before its answer began/);
  });

  it('what cannot be sent is refused before anything is sent: an item that is not an object, an idempotency key the server would refuse (decisions §3.5), a name or id no URL can carry', async () => {
    const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
    for (const [what, call] of [
      ['array item', () => c.post('thumbnails', [1, 2] as unknown as Record<string, unknown>)],
      ['empty key', () => c.post('thumbnails', { n: 1 }, '')],
      ['key with a newline', () => c.post('thumbnails', { n: 1 }, 'a\nb')],
      ['batch key too long', () => c.postBatch('thumbnails', [{ n: 1 }], 'k'.repeat(201))],
      // No URL can carry a lone surrogate: it is a ClientError, not the URIError encodeURIComponent throws.
      ['item id with a lone surrogate', () => c.item('thumbnails', 'ab\ud800cd')],
      ['queue name with a lone surrogate', () => c.post('thumb\udc00', { n: 1 })],
      ['result for an id with a lone surrogate', () => c.submit('thumbnails', '\ud800', 'result', { ok: true })],
    ] as Array<[string, () => Promise<unknown>]>) {
      const err = await call().then(() => undefined, (e: unknown) => e);
      expect(err, what).to.be.instanceOf(ClientError);
      expect((err as ClientError).code, what).to.equal('invalid-argument');
      expect((err as ClientError).sent, what).to.equal(false);
    }
    // The wall without a token names no flag of the command line from the library.
    const anonymous = new SvcqClient({ url: server.url, host: HOST });
    const wall = await anonymous.post('thumbnails', { n: 1 }).then(() => undefined, (e: unknown) => e);
    expect((wall as ClientError).message).to.equal('not found (wrong token, host or queue?): no token was given');
  });

  it('a claim hands in both its done entries and raw hand-ins, done first (decisions §3.8)', async () => {
    const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
    const a = (await c.post('thumbnails', { n: 'a' })).id;
    const b = (await c.post('thumbnails', { n: 'b' })).id;
    const claimed = await c.claim('thumbnails', { worker: 'w', max: 2 });
    expect(claimed.items.map((i) => i.id)).to.include.members([a, b]);
    const answer = await c.claim('thumbnails', { worker: 'w', max: 1, done: [{ id: a, result: { via: 'done' } }] }, { handIns: [{ id: b, kind: 'result', record: '{"via":"raw"}' }] });
    expect(answer.done?.map((d) => d.id)).to.deep.equal([a, b]);
    expect((await c.item('thumbnails', a)).result).to.deep.equal({ via: 'done' });
    expect((await c.item('thumbnails', b)).result).to.deep.equal({ via: 'raw' });
  });

  it('pause and resume take a queue by host and name with the master token (decisions §8.4): a paused queue leases nothing; an undefined pair rejects with code no-such-queue', async () => {
    await defineQueue(server, HOST, 'paused', { access: { post: ['resizer'], work: ['resizer'] } });
    const operator = new SvcqClient({ url: server.url, token: server.masterToken });
    const worker = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
    const id = (await worker.post('paused', { n: 1 })).id;
    expect(await operator.pause(HOST, 'paused')).to.deep.equal({ paused: true });
    expect(await operator.pause(HOST, 'paused')).to.deep.equal({ paused: true });
    expect(await worker.claim('paused', { worker: 'w' })).to.deep.include({ ok: true, empty: true });
    expect(await operator.resume(HOST, 'paused')).to.deep.equal({ paused: false });
    expect(await worker.claim('paused', { worker: 'w' })).to.deep.include({ id });
    const missing = await operator.pause(HOST, 'no-such-queue').catch((err: unknown) => err);
    expect(missing).to.be.instanceOf(ClientError);
    expect(missing).to.include({ code: 'no-such-queue', status: 404, message: 'no such queue' });
    // A user's token is not the master token: the wall.
    const walled = await new SvcqClient({ url: server.url, token: TOKEN }).resume(HOST, 'paused').catch((err: unknown) => err);
    expect(walled).to.include({ code: 'wall', status: 404 });
  });
});
