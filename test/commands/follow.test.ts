import { spawn } from 'node:child_process';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { BIN, serverForSuite } from '../support/server.js';
import { eventually, today } from '../tools/helpers.js';
import { HOST, defineQueue, postItem, queueName } from '../worker/support.js';

/** A follower process whose output is collected; killed by `stop`. */
function follow(args: string[], env: Record<string, string>): { out: () => string; stop: () => void } {
  const proc = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
  return { out: () => out, stop: () => proc.kill() };
}

const settle = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('--follow works like tail -f: the last --lines lines (10 by default), then what is new', () => {
  const server = serverForSuite();
  const env = (): Record<string, string> => ({ SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken, NO_COLOR: '1' });

  it('tasks show --follow prints the last 10 events of the day, not the whole day, then new events as they come', async () => {
    const queue = queueName('follow');
    await defineQueue(server, queue);
    const ids: string[] = [];
    for (let i = 0; i < 25; i++) ids.push(await postItem(server, queue, { i }));
    const follower = follow(['tasks', 'show', `tasks-${today()}.log`, '--follow'], env());
    try {
      await eventually('the last event', () => (follower.out().includes(ids.at(-1)!) ? true : undefined), 10_000);
      await settle(1500);
      const first = follower.out().trim().split('\n');
      expect(first).to.have.length(10);
      ids.slice(0, 15).forEach((id) => expect(follower.out()).to.not.include(id));
      ids.slice(15).forEach((id, i) => expect(first[i]).to.include(id));
      const fresh = await postItem(server, queue, { i: 25 });
      await eventually('the new event', () => (follower.out().includes(fresh) ? true : undefined), 10_000);
      expect(follower.out().trim().split('\n')).to.have.length(11);
    } finally {
      follower.stop();
    }
  });

  it('tasks show --follow --lines 3 starts from the last 3 events; --lines without --follow prints the last N and exits', async () => {
    const name = `tasks-${today()}.log`;
    const three = await runCli(['tasks', 'show', name, '--lines', '3'], { env: env() });
    expect(three.code, three.stderr).to.equal(0);
    expect(three.stdout.trim().split('\n')).to.have.length(3);
    const json = await runCli(['tasks', 'show', name, '-n', '2', '--json'], { env: env() });
    expect(JSON.parse(json.stdout) as unknown[]).to.have.length(2);
    const follower = follow(['tasks', 'show', name, '--follow', '--lines', '3'], env());
    try {
      await eventually('three events', () => (follower.out().trim().split('\n').length >= 3 ? true : undefined), 10_000);
      await settle(1500);
      expect(follower.out().trim().split('\n')).to.have.length(3);
    } finally {
      follower.stop();
    }
  });

  it('logs show --follow prints the last 10 requests, then new ones, and never the requests that read the log (its own polls)', async () => {
    for (let i = 0; i < 15; i++) await request(server.url, `/before-${i}`, { host: HOST });
    const follower = follow(['logs', 'show', '--follow'], env());
    try {
      await eventually('the last request before following', () => (follower.out().includes('"path":"/before-14"') ? true : undefined), 10_000);
      // Several polls happen meanwhile; none of them may show.
      await settle(2500);
      const first = follower.out().trim().split('\n');
      expect(first).to.have.length(10);
      for (let i = 0; i < 5; i++) expect(follower.out()).to.not.include(`"path":"/before-${i}"`);
      for (let i = 5; i < 15; i++) expect(first[i - 5]).to.include(`"path":"/before-${i}"`);
      await request(server.url, '/after-0', { host: HOST });
      await eventually('the new request', () => (follower.out().includes('"path":"/after-0"') ? true : undefined), 10_000);
      await settle(1500);
      expect(follower.out()).to.not.match(/"path":"\/api\/v2\/logs(\/file)?"/);
      expect(follower.out().trim().split('\n')).to.have.length(11);
    } finally {
      follower.stop();
    }
  });

  it('logs show --follow --include-log-reads also prints the requests that read the log', async () => {
    const follower = follow(['logs', 'show', '--follow', '--include-log-reads', '--lines', '0'], env());
    try {
      await eventually('a poll of the follower', () => (follower.out().includes('"path":"/api/v2/logs/file"') ? true : undefined), 10_000);
    } finally {
      follower.stop();
    }
  });

  it('says in --help what --follow leaves out and how to show it', async () => {
    const help = await runCli(['logs', 'show', '--help']);
    expect(help.stdout).to.include('--include-log-reads');
    expect(help.stdout.replace(/\s+/g, ' ')).to.include('requests that read the access log itself (paths /api/v2/logs and /api/v2/logs/file) are left out');
    expect(help.stdout).to.match(/-n, --lines=<value>/);
  });
});
