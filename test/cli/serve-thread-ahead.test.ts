import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import { copyBuiltPackage } from '../support/package-copy.js';
import { tempDirEachTest } from '../support/server.js';

/**
 * `svcq serve` starts its server thread as soon as it sees its command, before oclif has loaded
 * and parsed the flags (src/http/server-thread.ts, prestartServerThread): the thread loads the
 * server meanwhile and waits for the options.
 */
describe('svcq serve, its server thread started ahead of the flags', () => {
  let dir = '';
  tempDirEachTest((d) => (dir = d));

  it('a serve that does not start a server (--help, a bad flag) ends as it would without that thread: the thread keeps nothing alive', () => {
    const bin = copyBuiltPackage(dir);
    const help = spawnSync(process.execPath, [bin, 'serve', '--help'], { encoding: 'utf8', timeout: 20_000 });
    expect(help.status).to.equal(0);
    expect(help.stdout).to.match(/^Run the svcq server\./);
    const bad = spawnSync(process.execPath, [bin, 'serve', '--port', 'eighty'], { encoding: 'utf8', timeout: 20_000 });
    expect(bad.status).to.equal(2);
    expect(bad.stderr).to.include('--port');
  });

  it('a server thread that cannot load (its entry missing from an installation) is one sentence and exit 1, nothing made under the root (decisions §1.2)', () => {
    const bin = copyBuiltPackage(dir);
    rmSync(path.join(dir, 'dist/cli/server-worker.js'));
    const root = path.join(dir, 'data');
    const run = spawnSync(process.execPath, [bin, 'serve', '--root', root, '--port', '0'], { encoding: 'utf8', timeout: 20_000 });
    expect(run.status).to.equal(1);
    expect(run.stdout).to.equal('');
    expect(run.stderr).to.match(/^svcq: cannot start: .*server-worker\.js.*\n$/);
    expect(existsSync(root)).to.equal(false);
  });
});
