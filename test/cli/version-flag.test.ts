import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { BIN, REPO } from '../support/server.js';

/** `svcq ARGS` from bin/run.js, or through oclif's own handling of every argument (bin/dev.js). */
function svcq(args: string[], through: 'run' | 'oclif'): { status: number | null; stdout: string; stderr: string } {
  const argv = through === 'run' ? [BIN, ...args] : ['--import', 'tsx', path.join(REPO, 'bin/dev.js'), ...args];
  return spawnSync(process.execPath, argv, { encoding: 'utf8', timeout: 30_000 });
}

describe('svcq --version, answered before oclif is loaded (src/cli/main.ts)', () => {
  for (const args of [['--version'], ['--version', '--json'], ['--version', 'queues']]) {
    it(`svcq ${args.join(' ')} prints what oclif prints for it, and exits 0`, () => {
      const ours = svcq(args, 'run');
      const oclifs = svcq(args, 'oclif');
      expect(oclifs.status).to.equal(0);
      expect(oclifs.stdout).to.match(/^svcq\/\S+ \S+-\S+ node-v\S+\n$/);
      expect(ours).to.deep.include({ status: 0, stdout: oclifs.stdout, stderr: '' });
    });
  }
});
