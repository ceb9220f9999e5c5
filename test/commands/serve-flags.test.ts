import { expect } from 'chai';
import Serve from '../../commands/serve.js';
import { runCli } from '../support/cli.js';
import { cleanupTemp, startServer, tempDir } from '../support/server.js';

describe('svcq serve flags (decisions §1.1)', () => {
  it('every flag has its environment variable: SVCQ_ and the name in capitals, - as _ (decisions §1.1)', () => {
    const names = Object.keys(Serve.flags);
    expect(names).to.include.members(['root', 'port', 'bind', 'master-token', 'shutdown-grace', 'log-max-bytes']);
    for (const name of names) {
      const flag = Serve.flags[name as keyof typeof Serve.flags] as { env?: string };
      expect(flag.env, `--${name}`).to.equal(`SVCQ_${name.toUpperCase().replaceAll('-', '_')}`);
    }
  });

  it('takes a flag from its environment variable (SVCQ_SHOW_TOKEN, SVCQ_LOG_KEEP) (decisions §1.1)', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const server = await startServer({ root, env: { SVCQ_SHOW_TOKEN: 'true', SVCQ_SHUTDOWN_GRACE: '1' } });
    try {
      expect(server.output()).to.include(`master token: ${server.masterToken}`);
    } finally {
      expect(await server.stop()).to.equal(0);
      cleanupTemp(root);
    }
    const bad = await runCli(['serve', '--root', root], { env: { SVCQ_LOG_KEEP: 'many' } });
    expect(bad.code).to.not.equal(0);
    expect(bad.stderr).to.match(/log-keep/);
  });
});

describe('durations a timer would wait on (Node timers hold at most 2^31 − 1 ms; past that they fire after 1 ms)', () => {
  it('refuses, naming the flag, a duration longer than a timer can wait, rather than firing at once: serve --stats-interval, work --timeout, top --interval', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const cases: Array<[string[], RegExp]> = [
      [['serve', '--root', root, '--stats-interval', '3000000000'], /--stats-interval/],
      [['work', 'q', '--exec', 'true', '--timeout', '3000000'], /--timeout/],
      [['top', '--interval', '3000000'], /--interval/],
    ];
    for (const [args, flag] of cases) {
      const r = await runCli(args, { timeoutMs: 10_000 });
      expect(r.code, args.join(' ')).to.equal(2);
      expect(r.stderr, args.join(' ')).to.match(flag).and.to.match(/less than or equal to/);
    }
    cleanupTemp(root);
  });
});
