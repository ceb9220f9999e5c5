import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { serverForSuite } from '../support/server.js';
import { HOST, defineQueue, queueName } from '../worker/support.js';

const HINT = "pass --host or set SVCQ_HOST: the queue's domain, e.g. jobs.example.com, sent as the Host header to pick the queue";

describe('a queue command without --host that meets the wall says no host was given, naming --host and SVCQ_HOST (decisions §1.2)', () => {
  const server = serverForSuite();
  const queue = queueName('hostless');
  // No token and no host: what a first try at a public queue looks like.
  const env = { SVCQ_TOKEN: '', SVCQ_HOST: '', NO_COLOR: '1' };

  before(async () => {
    await defineQueue(server, queue);
  });

  it('post, item, cancel and work without --host or a token name the host first (a public queue needs no token), then the token', async () => {
    const sentence = `not found (wrong token, host or queue?): no host was given, so the queue was looked for on 127.0.0.1 (${HINT}); no token was given either (pass --token or set SVCQ_TOKEN)`;
    const runs = await Promise.all([
      runCli(['post', queue, '{"n":1}', '--url', server.url], { env }),
      runCli(['item', queue, '0123456789abcdef', '--url', server.url], { env }),
      runCli(['item', queue, '0123456789abcdef', '--wait', '--url', server.url], { env }),
      runCli(['cancel', queue, '0123456789abcdef', '--url', server.url], { env }),
      runCli(['work', queue, '--exec', 'cat', '--once', '--wait', '0', '--url', server.url], { env }),
    ]);
    for (const [n, run] of runs.entries()) {
      expect(run.code, run.stderr).to.equal(1);
      // The worker says what it was doing first ("cannot claim from QUEUE: ...").
      expect(run.stderr, run.stderr).to.match(n < 4 ? /^svcq: / : /^cannot claim from /);
      expect(run.stderr.trim().endsWith(sentence), run.stderr).to.equal(true);
      expect(run.stderr.trim().split('\n'), run.stderr).to.have.length(1);
    }
  });

  it('with a token but no --host the sentence says no host was given, and nothing of the token', async () => {
    const run = await runCli(['post', queue, '{"n":1}', '--url', server.url, '--token', 'some-user-token'], { env });
    expect(run.code).to.equal(1);
    expect(run.stderr).to.equal(`svcq: not found (wrong token, host or queue?): no host was given, so the queue was looked for on 127.0.0.1 (${HINT})\n`);
  });

  it('with --json the sentence is { error } on stderr', async () => {
    const run = await runCli(['item', queue, '0123456789abcdef', '--json', '--url', server.url], { env });
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('');
    expect((JSON.parse(run.stderr) as { error: string }).error).to.match(/^not found \(wrong token, host or queue\?\): no host was given, so the queue was looked for on 127\.0\.0\.1 \(pass --host or set SVCQ_HOST/);
  });

  it('with the host given (by --host or SVCQ_HOST) the public queue answers, and a missing token alone is what the wall names', async () => {
    const byFlag = await runCli(['post', queue, '{"n":1}', '--url', server.url, '--host', HOST], { env });
    expect(byFlag.code, byFlag.stderr).to.equal(0);
    const byEnv = await runCli(['post', queue, '{"n":2}', '--url', server.url], { env: { ...env, SVCQ_HOST: HOST } });
    expect(byEnv.code, byEnv.stderr).to.equal(0);
    const elsewhere = await runCli(['post', 'no-such-queue', '{"n":1}', '--url', server.url, '--host', HOST], { env });
    expect(elsewhere.stderr).to.equal('svcq: not found (wrong token, host or queue?): no token was given (pass --token or set SVCQ_TOKEN)\n');
  });
});
