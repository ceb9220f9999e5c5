import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { runCli } from '../support/cli.js';
import { REPO, serverForSuite } from '../support/server.js';
import { HOST, defineQueue, queueName } from '../worker/support.js';

const VERSION = (JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
/** A port nothing listens on: connection refused at once. */
const DEAD_URL = 'http://127.0.0.1:1';

describe('svcq version and the wall without a token (decisions §1.2)', () => {
  const server = serverForSuite();

  it('version prints the client version even when the server cannot be reached, says so, and exits 1', async () => {
    const run = await runCli(['version', '--url', DEAD_URL, '--token', 'x']);
    expect(run.code).to.equal(1);
    expect(run.stdout).to.include(`svcq ${VERSION} (api 2)`);
    expect(run.stdout).to.include('the server could not be asked');
    expect(run.stderr.trim().split('\n')).to.have.length(1);
    expect(run.stderr).to.match(/^svcq: cannot reach .*127\.0\.0\.1:1/);
  });

  it('a --url that is not an http:// URL is named by its flag (decisions §1.2)', async () => {
    const run = await runCli(['version', '--url', 'jobs.example.com:8080']);
    expect(run.code).to.equal(1);
    expect(run.stderr.trim()).to.equal('svcq: --url: the server URL "jobs.example.com:8080" is not http:// (the only scheme supported)');
  });

  it('version --json with an unreachable server prints { client, server: null, error } and exits 1', async () => {
    const run = await runCli(['version', '--url', DEAD_URL, '--json']);
    expect(run.code).to.equal(1);
    const out = JSON.parse(run.stdout) as { client: string; server: unknown; error: string };
    expect(out.client).to.equal(VERSION);
    expect(out.server).to.equal(null);
    expect(out.error).to.match(/cannot reach/);
  });

  it('version prints the client version when the server answers the wall, and both versions when it answers', async () => {
    const wall = await runCli(['version', '--url', server.url], { env: { SVCQ_TOKEN: '' } });
    expect(wall.code).to.equal(1);
    expect(wall.stdout).to.include(`svcq ${VERSION} (api 2)`);
    const ok = await runCli(['version', '--url', server.url, '--token', server.masterToken]);
    expect(ok.code, ok.stderr).to.equal(0);
    expect(ok.stdout.trim()).to.equal(`svcq ${VERSION} (api 2); server api 2`);
  });

  it('the wall without a token says the wall\'s sentence, then that no token was given (decisions §1.2; management and queue commands)', async () => {
    const queue = queueName('tokenless');
    await defineQueue(server, queue, { access: { post: ['alice'], fetch: ['alice'] } });
    const env = { SVCQ_TOKEN: '', SVCQ_URL: server.url };
    const runs = await Promise.all([runCli(['manifest'], { env }), runCli(['item', queue, '0123456789abcdef', '--host', HOST], { env }), runCli(['post', queue, '{}', '--host', HOST], { env })]);
    for (const run of runs) {
      expect(run.code).to.not.equal(0);
      expect(run.stderr.trim()).to.equal('svcq: not found (wrong token, host or queue?): no token was given (pass --token or set SVCQ_TOKEN)');
    }
  });

  it('the wall with a token keeps saying "not found (wrong token, host or queue?)"', async () => {
    const run = await runCli(['manifest', '--url', server.url, '--token', 'not-the-master-token']);
    expect(run.code).to.not.equal(0);
    expect(run.stderr.trim()).to.equal('svcq: not found (wrong token, host or queue?)');
  });
});
