import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { copyBuiltPackage } from '../support/package-copy.js';
import { REPO, tempDirEachTest } from '../support/server.js';

const BUNDLE = path.join(REPO, 'dist', 'cli');

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

describe('the server thread\'s code as a server loads it at start (dist/cli/server-worker.js and the chunks it imports)', () => {
  /** The bundle's files that `file` imports statically, and theirs, `file` included. */
  function loadedWith(file: string, seen = new Set<string>()): Set<string> {
    if (seen.has(file)) return seen;
    seen.add(file);
    for (const m of readFileSync(path.join(BUNDLE, file), 'utf8').matchAll(/^(?:import|export)\s[^;]*?["'](\.\/[^"']+\.js)["']/gm)) loadedWith(m[1]!.slice(2), seen);
    return seen;
  }

  it('leaves out what only some servers need, loaded when first needed: undici at the first outbound call (a push delivery or a callback), pg and the PostgreSQL store with --store postgres://; together three quarters of the thread\'s code, which every embedded server would read and compile at start', () => {
    const atStart = loadedWith('server-worker.js');
    expect(atStart.size, 'files loaded at start').to.be.above(1);
    const text = new Map(readdirSync(BUNDLE).filter((f) => f.endsWith('.js')).map((f) => [f, readFileSync(path.join(BUNDLE, f), 'utf8')]));
    for (const [pkg, marker] of [
      ['undici', 'node_modules/undici/'],
      ['pg', 'node_modules/pg/'],
      ['the PostgreSQL store', 'src/store/postgres/postgres-store.ts'],
    ]) {
      const holding = (files: Iterable<string>): string[] => [...files].filter((f) => text.get(f)!.includes(marker!));
      expect(holding(atStart), `files loaded at start that hold ${pkg}`).to.deep.equal([]);
      // In the bundle all the same, in a file that the thread imports when asked.
      expect(holding(text.keys()), `files that hold ${pkg}`).to.have.length.above(0);
    }
  });
});
