import { spawn } from 'node:child_process';
import net, { type AddressInfo } from 'node:net';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { BIN, cleanupTemp, startServer } from '../support/server.js';
import { HOST, defineQueue, postItem, queueName, until } from '../worker/support.js';

/** A port nothing listens on: connection refused at once. */
const DEAD_URL = 'http://127.0.0.1:1';
const ID = '0123456789abcdef';

const running = new Set<ReturnType<typeof spawn>>();

/** Runs `svcq item ... --wait` and records when each stderr line arrived (ms after the start). */
function waitItem(args: string[]): { lines: Array<{ at: number; text: string }>; done: Promise<number | null>; stdout: () => string } {
  const started = Date.now();
  const proc = spawn(process.execPath, [BIN, 'item', ...args, '--wait'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Array<{ at: number; text: string }> = [];
  let out = '';
  let partial = '';
  proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr.on('data', (c: Buffer) => {
    partial += c.toString();
    const whole = partial.split('\n');
    partial = whole.pop()!;
    for (const text of whole) lines.push({ at: Date.now() - started, text });
  });
  running.add(proc);
  const done = new Promise<number | null>((resolve) => proc.once('exit', resolve));
  void done.then(() => running.delete(proc));
  return { lines, done, stdout: () => out };
}

describe('svcq item --wait against a server it cannot reach (give up after --give-up seconds)', () => {
  // A test that fails must not leave a waiting process behind.
  afterEach(() => running.forEach((proc) => proc.kill('SIGKILL')));

  it('says what is failing on the first failure, at once, and gives up with one sentence and exit 1 after --give-up', async () => {
    const run = waitItem(['q', ID, '--url', DEAD_URL, '--give-up', '3']);
    await until(() => run.lines.length > 0, 'the first failure to be reported', 10_000);
    expect(run.lines[0]!.text).to.equal('svcq: cannot reach http://127.0.0.1:1 (connection refused); retrying');
    const code = await run.done;
    expect(code).to.equal(1);
    const last = run.lines.at(-1)!;
    expect(last.text).to.equal(`svcq: gave up waiting for item ${ID} after 3 s of failures: cannot reach http://127.0.0.1:1 (connection refused)`);
    // The first failure is reported as it happens, the verdict --give-up after it (counted from
    // the report, not from the process's start, which a loaded machine slows).
    expect(last.at - run.lines[0]!.at).to.be.within(2500, 6000);
    // Nothing between the first report and the verdict: the next report is due only after 10 s.
    expect(run.lines).to.have.length(2);
    expect(run.lines.map((l) => l.text).join('\n')).to.not.match(/\s+at .*:\d+:\d+/);
  });

  it('keeps saying it now and then, at most every 10 s, while it retries', async function () {
    this.timeout(30_000);
    const run = waitItem(['q', ID, '--url', DEAD_URL, '--give-up', '12']);
    expect(await run.done).to.equal(1);
    const reports = run.lines.filter((l) => l.text.includes('retrying'));
    expect(reports).to.have.length(2);
    expect(reports[0]!.text).to.equal('svcq: cannot reach http://127.0.0.1:1 (connection refused); retrying');
    expect(reports[1]!.text).to.match(/^svcq: cannot reach http:\/\/127\.0\.0\.1:1 \(connection refused\); still retrying after 1[01] s, giving up after 12 s$/);
    expect(reports[1]!.at - reports[0]!.at).to.be.at.least(9500);
    expect(run.lines.at(-1)!.text).to.match(/^svcq: gave up waiting for item 0123456789abcdef after 12 s/);
  });

  it('--give-up 0 gives up at the first failure; --json says it as { error } on stderr (decisions §1.2)', async () => {
    const run = await runCli(['item', 'q', ID, '--wait', '--url', DEAD_URL, '--give-up', '0', '--json']);
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('');
    expect(JSON.parse(run.stderr)).to.deep.equal({ error: `gave up waiting for item ${ID} after 0 s of failures: cannot reach http://127.0.0.1:1 (connection refused)` });
  });

  it('gives up on a server that takes the request and never answers about --give-up after its long poll, not a minute per try', async function () {
    this.timeout(20_000);
    // Connections are accepted and read, and nothing is ever answered.
    const silent = net.createServer((socket) => socket.resume());
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const port = (silent.address() as AddressInfo).port;
      const run = waitItem(['q', ID, '--url', `http://127.0.0.1:${port}`, '--host', HOST, '--give-up', '2']);
      expect(await run.done).to.equal(1);
      // A 2 s long poll, then 2 s more for its answer: failing since the request went out.
      const last = run.lines.at(-1)!;
      expect(last.text).to.equal(`svcq: gave up waiting for item ${ID} after 4 s of failures: cannot reach http://127.0.0.1:${port} (no answer within 4 s)`);
      expect(last.at).to.be.within(3500, 9000);
    } finally {
      silent.close();
    }
  });

  it('counts failures from a reset that ends a held long poll, not from when the poll was sent: a server killed late in a poll gets the whole of --give-up', async function () {
    this.timeout(20_000);
    // The poll is held 2.5 s of its 3, then the connection is reset and nothing listens any more.
    let resetAt = 0;
    const started = Date.now();
    const dying = net.createServer((socket) => {
      socket.resume();
      setTimeout(() => {
        resetAt = Date.now() - started;
        socket.resetAndDestroy();
        dying.close();
      }, 2500);
    });
    await new Promise<void>((resolve) => dying.listen(0, '127.0.0.1', resolve));
    const port = (dying.address() as AddressInfo).port;
    const run = waitItem(['q', ID, '--url', `http://127.0.0.1:${port}`, '--host', HOST, '--give-up', '3']);
    expect(await run.done).to.equal(1);
    const last = run.lines.at(-1)!;
    expect(last.text).to.match(new RegExp(`^svcq: gave up waiting for item ${ID} after 3 s of failures: cannot reach http://127\\.0\\.0\\.1:${port} \\(connection refused\\)$`));
    // Backdated to the poll's start, it gave up half a second after the reset.
    expect(last.at - resetAt).to.be.within(2500, 6000);
  });

  it('documents --give-up and its default of 60 s in --help', async () => {
    const help = await runCli(['item', '--help']);
    expect(help.stdout).to.match(/--give-up=<value>\s+\[default: 60\]/);
  });

  it('rides out a server restart within --give-up, says when the server answers again, and prints the finished item', async function () {
    this.timeout(30_000);
    const first = await startServer();
    const { root, port } = first;
    let second: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      const queue = queueName('restart');
      await defineQueue(first, queue);
      const id = await postItem(first, queue, { n: 1 });
      const run = waitItem([queue, id, '--url', first.url, '--host', HOST, '--give-up', '30']);
      await new Promise((resolve) => setTimeout(resolve, 500));
      await first.stop();
      await until(() => run.lines.some((l) => l.text.includes('retrying')), 'the failure to be reported', 10_000);
      second = await startServer({ root, port, masterToken: first.masterToken });
      const claim = await request(second.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{}' });
      expect(claim.status, claim.text).to.equal(200);
      const result = await request(second.url, `/${queue}/items/${id}/result`, { method: 'POST', host: HOST, body: '{"ok":1}' });
      expect(result.json, result.text).to.deep.include({ accepted: true, status: 'finished' });
      expect(await run.done).to.equal(0);
      expect(run.stdout()).to.match(/status +finished/);
      expect(run.lines.map((l) => l.text)).to.include('svcq: the server answers again; waiting');
    } finally {
      await second?.stop();
      await first.stop();
      cleanupTemp(root);
    }
  });
});
