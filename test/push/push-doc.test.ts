import { expect } from 'chai';
import { readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { sign } from '../../src/push/sign.js';
import { fencedBlocks, freePort, markedBlocks, normalise, runBlocks, startBackground, type Block, type Started } from '../docs/doc-blocks.js';
import { REPO, cleanupTemp, tempDir } from '../support/server.js';

/**
 * docs/push.md as a reader uses it (decisions §9.1; STYLE: examples are executable and tested):
 * its Node and Python workers, as the page shows them, started as the targets of a server started
 * with the page's --push-allow; then every curl block of the page, each printing what the page
 * shows; and its callback receiver, sent a signed call and an unsigned one. The only changes: free
 * ports in place of 8080, 9000, 9001 and 9002.
 */
describe('docs/push.md: its workers, its curl blocks and its callback receiver run as the page shows them (decisions §9.1)', function () {
  this.timeout(60_000);
  const doc = readFileSync(path.join(REPO, 'docs/push.md'), 'utf8');
  const SECRET = 'a-long-random-secret-of-32-chars';
  let work = '';
  const ports = { server: 0, node: 0, python: 0, receiver: 0 };
  const started: Started[] = [];
  let adapt = (code: string): string => code;
  let env: NodeJS.ProcessEnv = {};

  before(async () => {
    work = tempDir('svcq-push-doc-');
    symlinkSync(path.join(REPO, 'bin'), path.join(work, 'bin'));
    for (const key of Object.keys(ports) as Array<keyof typeof ports>) ports[key] = await freePort();
    adapt = (code) => code.replaceAll('8080', String(ports.server)).replaceAll('9000', String(ports.node)).replaceAll('9001', String(ports.python)).replaceAll('9002', String(ports.receiver));
    env = { ...process.env, SVCQ_SECRET: SECRET };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_') && key !== 'SVCQ_SECRET') delete env[key];
  });

  after(() => {
    for (const s of started) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGKILL');
    cleanupTemp(work);
  });

  const background = async (code: string, ready: string): Promise<Started> => {
    const s = await startBackground({ kind: 'background', code, ready }, work, env);
    started.push(s);
    return s;
  };

  it('starts the Node worker, the Python worker and the server the page shows', async () => {
    const js = fencedBlocks(doc).filter((b) => b.lang === 'js');
    const python = fencedBlocks(doc).filter((b) => b.lang === 'python');
    expect(js).to.have.length(2);
    expect(python).to.have.length(1);
    writeFileSync(path.join(work, 'worker.mjs'), adapt(js[0]!.code));
    writeFileSync(path.join(work, 'worker.py'), adapt(python[0]!.code));
    writeFileSync(path.join(work, 'receiver.mjs'), adapt(js[1]!.code));
    // "a ten-line HTTP handler": short enough to read at a glance.
    expect(js[0]!.code.trim().split('\n').length).to.be.at.most(14);
    expect(python[0]!.code.trim().split('\n').length).to.be.at.most(14);
    await background(`"${process.execPath}" worker.mjs`, `worker listening on ${ports.node}`);
    await background('python3 worker.py', `worker listening on ${ports.python}`);
    const serve = fencedBlocks(doc).find((b) => b.code.includes(' serve '));
    expect(serve?.code.trim()).to.equal('./bin/run.js serve --root ./data --push-allow http://127.0.0.1:9000/ --push-allow http://127.0.0.1:9001/');
    await background(`${adapt(serve!.code.trim())} --port ${ports.server}`, 'listening on');
  });

  it('runs every curl block of the page, in order, and each prints what the page shows', async () => {
    for (const b of fencedBlocks(doc)) if (b.lang === 'sh') expect(b.marked, b.code).to.equal('push: run');
    const blocks = markedBlocks(doc, 'push').map((b): Block => ({ ...b, code: adapt(b.code) }));
    expect(blocks.length).to.equal(4);
    const run = await runBlocks(blocks, { cwd: work, env, dir: work, name: 'push' });
    expect(run.code, `${run.stdout}\n${run.stderr}\n${started.map((s) => s.output()).join('\n---\n')}`).to.equal(0);
    blocks.forEach((b, i) => expect(normalise(run.perBlock[i]!), `block ${i}:\n${b.code}`).to.equal(normalise(b.prints!)));
  });

  it('its callback receiver takes a signed call and refuses an unsigned one', async () => {
    const receiver = await background(`"${process.execPath}" receiver.mjs`, `receiver listening on ${ports.receiver}`);
    const record = JSON.stringify({ id: '0123456789abcdef', status: 'finished', result: { thumbnail: 'cat.png.small.png' }, error: null });
    const url = `http://127.0.0.1:${ports.receiver}/`;
    const signed = await fetch(url, { method: 'POST', body: record, headers: { 'content-type': 'application/json', 'svcq-event': 'finished', ...sign(SECRET, record, Date.now()) } });
    expect(signed.status).to.equal(204);
    const unsigned = await fetch(url, { method: 'POST', body: record, headers: { 'content-type': 'application/json', 'svcq-event': 'finished' } });
    expect(unsigned.status).to.equal(401);
    expect(receiver.output()).to.include('item 0123456789abcdef finished: {"thumbnail":"cat.png.small.png"}');
  });
});
