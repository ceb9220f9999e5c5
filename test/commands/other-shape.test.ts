import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';

/**
 * decisions §1.2: an error is one clear sentence on stderr and a non-zero exit. A server that
 * answers 200 with a JSON object of another shape (another service behind --url, a proxy's stub)
 * is not svcq: each command says so, naming the request and the first field that differs, instead
 * of a TypeError, "undefined undefined" or exit 0.
 */
describe('client commands against a server answering JSON of another shape (decisions §1.2)', () => {
  let server: http.Server;
  let url: string;

  before(async () => {
    server = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());

  const sentence = (asked: string, mismatch: string): string => `${url} did not answer as svcq does (${asked}: ${mismatch}): is --url right?`;

  const commands: Array<[string[], string, string]> = [
    [['queues'], 'GET /api/v2/queues', '"queues" is missing'],
    [['queue', 'jobs.test/q'], 'GET /api/v2/queues/jobs.test/q', '"host" is missing'],
    [['tasks'], 'GET /api/v2/tasks', '"files" is missing'],
    [['logs'], 'GET /api/v2/logs', '"active" is missing'],
    [['stats'], 'GET /api/v2/stats', '"interval" is missing'],
    [['stats', 'now'], 'GET /api/v2/stats/now', '"ts" is missing'],
    [['item', 'q', '0123456789abcdef', '--host', 'jobs.test'], 'GET /q/items/0123456789abcdef', '"id" is missing'],
    [['post', 'q', '{"n":1}', '--host', 'jobs.test'], 'POST /q', '"id" is missing'],
    [['cancel', 'q', '0123456789abcdef', '--host', 'jobs.test'], 'POST /q/items/0123456789abcdef/cancel', '"accepted" is missing'],
  ];

  for (const [args, asked, mismatch] of commands) {
    it(`svcq ${args.slice(0, 2).join(' ')}: one sentence naming ${asked}, exit 1, also with --json`, async () => {
      const run = await runCli([...args, '--url', url, '--token', 'some-token'], { env: { NO_COLOR: '1' } });
      expect(run.code, run.stderr).to.equal(1);
      expect(run.stdout).to.equal('');
      expect(run.stderr).to.equal(`svcq: ${sentence(asked, mismatch)}\n`);
      const json = await runCli([...args, '--json', '--url', url, '--token', 'some-token']);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stderr)).to.deep.equal({ error: sentence(asked, mismatch) });
    });
  }

  it('svcq version prints its own version, then one sentence naming GET /api/version, exit 1; with --json the server is null and error says why', async () => {
    const run = await runCli(['version', '--url', url], { env: { NO_COLOR: '1' } });
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('svcq 0.1.0 (api 2); the server could not be asked\n');
    expect(run.stderr).to.equal(`svcq: ${sentence('GET /api/version', '"api" is missing')}\n`);
    const json = await runCli(['version', '--json', '--url', url]);
    expect(json.code).to.equal(1);
    expect(JSON.parse(json.stdout)).to.deep.equal({ client: '0.1.0', api: 2, server: null, error: sentence('GET /api/version', '"api" is missing') });
  });

  it('svcq post of JSON lines: the batch went out and its answer says nothing, so its items may have been posted (not "were not posted")', async () => {
    const run = await runCli(['post', 'q', '-', '--url', url, '--host', 'jobs.test'], { input: '{"n":1}\n{"n":2}\n', env: { NO_COLOR: '1' } });
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('');
    expect(run.stderr).to.equal(
      `svcq: 2 item(s) may or may not have been posted (line 1 of stdin to line 2 of stdin): they went out, and no answer said what became of them: ${sentence('POST /q/batch', '"items" is missing')}\n` +
        'svcq: 2 of 2 item(s) may not have been posted\n',
    );
  });

  it('svcq work stops with one sentence about the claim instead of reading an answer without a lease', async () => {
    const run = await runCli(['work', 'q', '--host', 'jobs.test', '--exec', 'cat', '--url', url], { timeoutMs: 15_000 });
    expect(run.code).to.equal(1);
    expect(run.stderr).to.include(`cannot claim from q: ${sentence('POST /q/claim', '"id" is missing')}`);
    expect(run.stderr).to.not.include('TypeError');
    expect(run.stdout).to.not.include('Cannot read properties');
  });

  it('svcq sync stops at a definition the server answers without "ok", with one sentence naming the file', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'svcq-shape-'));
    try {
      mkdirSync(path.join(dir, 'jobs.test', 'svc-queues'), { recursive: true });
      for (const name of ['a', 'b']) writeFileSync(path.join(dir, 'jobs.test', 'svc-queues', `${name}.json`), JSON.stringify({ leaseSeconds: 60, access: { post: 'public', fetch: 'public', work: 'public' } }));
      const run = await runCli(['sync', dir, '--url', url, '--token', 'some-token'], { env: { NO_COLOR: '1' } });
      expect(run.code).to.equal(1);
      expect(run.stdout).to.equal('');
      expect(run.stderr).to.match(new RegExp(`^svcq: jobs\\.test/svc-queues/[ab]\\.json: ${sentence('PUT /api/v2/def', '"ok" is missing').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
