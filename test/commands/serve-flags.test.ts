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
