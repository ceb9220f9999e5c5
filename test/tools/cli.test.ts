import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { BIN, cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { freePort } from '../docs/doc-blocks.js';
import { eventually, putQueue, today, tools } from './helpers.js';

const HOST = 'jobs.cli-tools.test';

/** `svcq logs show --follow` running against a server, and a wait until it prints a request made now (its own polls it hides). */
async function follow(server: TestServer, env: Record<string, string>, ready: string): Promise<{ proc: ChildProcess; stdout: () => string; stderr: () => string }> {
  const proc = spawn(process.execPath, [BIN, 'logs', 'show', '--follow'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  await eventually(
    'the follower to print the log',
    async () => {
      await request(server.url, ready, { host: HOST });
      return stdout.includes(`"path":"${ready}"`) ? true : undefined;
    },
    15_000,
  ).catch((err: Error) => {
    proc.kill();
    throw new Error(`${err.message}; it printed:\n${stdout}${stderr}`);
  });
  return { proc, stdout: () => stdout, stderr: () => stderr };
}

describe('svcq logs, stats, tasks and payload (decisions §1.2)', () => {
  let server: TestServer;
  let env: Record<string, string>;
  before(async () => {
    server = await startServer({ args: ['--log-max-bytes', '2000', '--stats-interval', '200'] });
    env = { SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken };
    await putQueue(server, HOST, 'clijobs', { access: { post: 'public', fetch: 'public', work: 'public' }, 'svc-queue-archivePayloads': true });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  it('logs show --follow prints new access lines as they are written, across a rotation, like tail -F, and not its own polls', async () => {
    const follower = await follow(server, env, '/follow-ready');
    try {
      // About 130 bytes a line against a 2000-byte limit: 40 requests rotate the active file at least twice.
      const markers = Array.from({ length: 40 }, (_, i) => `/follow-marker-${i}`);
      for (const marker of markers) await request(server.url, marker, { host: HOST });
      // The follower polls once a second; a loaded machine may take a few polls.
      await eventually('every marker line', () => (markers.every((m) => follower.stdout().includes(`"path":"${m}"`)) ? true : undefined), 20_000).catch((err: Error) => {
        const missing = markers.filter((m) => !follower.stdout().includes(`"path":"${m}"`));
        throw new Error(`${err.message}: ${missing.length} missing (${missing.join(' ')}); the follower ${follower.proc.exitCode === null ? 'still runs' : `exited ${follower.proc.exitCode}`} and printed:\n${follower.stdout().slice(-3000)}${follower.stderr()}`);
      });
      for (const marker of markers) expect(follower.stdout().split(`"path":"${marker}"`).length - 1, marker).to.equal(1);
      expect(follower.stdout()).to.not.include('"path":"/api/v2/logs/file"');
      expect(follower.stdout()).to.not.include('"path":"/api/v2/logs"');
      const list = (await runCli(['logs', '--json'], { env })).stdout;
      expect((JSON.parse(list) as { rotated: unknown[] }).rotated.length).to.be.at.least(2);
    } finally {
      follower.proc.kill();
    }
  });

  it('logs prints a table of the active and rotated files with human sizes', async () => {
    const table = await runCli(['logs'], { env });
    expect(table.code, table.stderr).to.equal(0);
    expect(table.stdout).to.include('access.log (active)');
    expect(table.stdout).to.match(/\d+(\.\d)? (B|KiB)/);
  });

  it('stats now shows a panel with bars, and --json the raw snapshot', async () => {
    const panel = await runCli(['stats', 'now'], { env });
    expect(panel.code, panel.stderr).to.equal(0);
    expect(panel.stdout).to.match(/\bup \d/);
    expect(panel.stdout).to.include('core 0');
    expect(panel.stdout).to.include('memory');
    const json = await runCli(['stats', 'now', '--json'], { env });
    expect(Object.keys(JSON.parse(json.stdout) as object).sort()).to.deep.equal(['cpu', 'disk', 'diskIo', 'hostname', 'load', 'memory', 'netIo', 'ts', 'uptime']);
  });

  it('stats show draws a chart of the day, and --json prints the samples as an array', async () => {
    const name = `cpu-${today()}.log`;
    await eventually('two cpu samples', async () => ((await tools(server, `stats/file?name=${name}`)).text.split('\n').length > 2 ? true : undefined));
    const json = await runCli(['stats', 'show', name, '--json'], { env });
    const samples = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
    expect(samples.length).to.be.at.least(2);
    expect(Object.keys(samples[0]!).sort()).to.deep.equal(['cores', 'model', 'ts']);
    const chart = await runCli(['stats', 'show', name], { env });
    expect(chart.code, chart.stderr).to.equal(0);
    expect(chart.stdout).to.include('CPU busy');
    expect(chart.stdout).to.match(/[┼┤]/);
    const bad = await runCli(['stats', 'show', '../cpu.log'], { env });
    expect(bad.code).to.not.equal(0);
    expect(bad.stderr).to.include('is neither a stats day-file name (<type>-YYYY-MM-DD.log, as svcq stats lists them) nor a type alone');
  });

  it('tasks show prints readable events, and payload the archived bytes unchanged', async () => {
    const item = '{ "size" : 3 }';
    const posted = await request(server.url, '/clijobs', { method: 'POST', host: HOST, body: item });
    const id = (posted.json as { id: string }).id;
    const events = await runCli(['tasks', 'show', `tasks-${today()}.log`], { env });
    expect(events.code, events.stderr).to.equal(0);
    expect(events.stdout).to.match(new RegExp(`posted\\s+${HOST}/clijobs\\s+${id}`));
    const payload = await runCli(['payload', '--host', HOST, '--queue', 'clijobs', '--id', id, '--kind', 'item'], { env });
    expect(payload.code, payload.stderr).to.equal(0);
    expect(payload.stdout).to.equal(item);
    const none = await runCli(['payload', '--host', HOST, '--queue', 'clijobs', '--id', id, '--kind', 'result'], { env });
    expect(none.code).to.equal(1);
    expect(none.stderr).to.include('no archived result');
    // The queue domain exported as for the queue commands (decisions §1.2) names the item's host here too.
    const fromEnv = await runCli(['payload', '--queue', 'clijobs', '--id', id, '--kind', 'item'], { env: { ...env, SVCQ_HOST: HOST } });
    expect(fromEnv.code, fromEnv.stderr).to.equal(0);
    expect(fromEnv.stdout).to.equal(item);
    // --json parses the body, its numbers as stored (JSON.parse would print 12345678901234567000 and 1).
    const big = await request(server.url, '/clijobs', { method: 'POST', host: HOST, body: '{"size":12345678901234567890,"ratio":1.0}' });
    const parsed = await runCli(['payload', '--host', HOST, '--queue', 'clijobs', '--id', (big.json as { id: string }).id, '--kind', 'item', '--json'], { env });
    expect(parsed.code, parsed.stderr).to.equal(0);
    expect(parsed.stdout).to.equal('{\n  "size": 12345678901234567890,\n  "ratio": 1.0\n}\n');
  });

  it('serve samples every 15000 ms unless --stats-interval says otherwise (interface §8)', async () => {
    const help = await runCli(['serve', '--help']);
    expect(help.stdout).to.match(/--stats-interval=<value>[^\n]*\n?[^\n]*default: 15000/);
  });
});

describe('svcq logs show --follow across a server restart (decisions §1.2)', function () {
  this.timeout(60_000);

  it('says once on stderr that the server went away, and carries on from where it was when the server answers again', async () => {
    // A port outside the ephemeral range: no other test's server takes it while this one is down.
    const port = await freePort();
    let server = await startServer({ port });
    const root = server.root;
    const env = { SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken };
    const follower = await follow(server, env, '/before-restart');
    try {
      expect(await server.stop()).to.equal(0);
      await eventually('the follower to say the server went away', () => (/svcq: cannot reach .*; trying again every 1 s\n/.test(follower.stderr()) ? true : undefined), 10_000).catch((err: Error) => {
        throw new Error(`${err.message}; the follower ${follower.proc.exitCode === null ? 'still runs' : `exited ${follower.proc.exitCode}`}, its stderr: ${follower.stderr()}`);
      });
      // Down for a few polls: the outage is told once, not once a poll.
      await new Promise((resolve) => setTimeout(resolve, 2500));
      expect(follower.proc.exitCode, follower.stderr()).to.equal(null);
      server = await startServer({ root, port });
      await request(server.url, '/after-restart', { host: HOST });
      await eventually('the follower to print what was logged after the restart', () => (follower.stdout().includes('"path":"/after-restart"') ? true : undefined), 15_000);
      // stderr is a pipe of its own: its line may reach this process after the stdout line that followed it.
      await eventually('the follower to say the server answers again', () => (follower.stderr().includes('svcq: the server answers again; following on\n') ? true : undefined), 5_000).catch((err: Error) => {
        throw new Error(`${err.message}; its stderr: ${follower.stderr()}`);
      });
      expect(follower.stderr().match(/trying again/g), follower.stderr()).to.have.length(1);
      // Carried on from its offset in the same file: nothing printed twice.
      expect(follower.stdout().split('"path":"/before-restart"').length - 1).to.be.at.least(1);
      const lines = follower.stdout().split('\n').filter(Boolean);
      expect(new Set(lines).size, 'no line printed twice').to.equal(lines.length);
    } finally {
      follower.proc.kill();
      await server.stop();
      cleanupTemp(root);
    }
  });
});
