import { expect } from 'chai';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { readdirSync, statSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { REPO, cleanupTemp, tempDir } from '../support/server.js';

/** Every file under `dir` with its modification time: what a build would change. */
function files(dir: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    out.set(path.relative(dir, file), statSync(file).mtimeMs);
  }
  return out;
}

/**
 * The way in after `npm install` in a checkout is `./bin/run.js`: npm's install builds what it
 * runs (`prepare`), and its first call builds and installs nothing more. (`npx svcq` in the
 * checkout is not: npm 11 takes a package's own bin as a package to install, links the checkout
 * into its npx cache and runs its `prepare`, a whole build, on the first call, whatever
 * node_modules/.bin holds; every later call pays npm's start and tree walk.) The clone takes what
 * is committed.
 *
 * The clone is not given an `npm install` of its own: CI runs exactly that on a fresh clone before
 * it runs these tests (.ci/run), so a second one here, a minute and a half of unpacking the same
 * packages again, would check nothing more. What is left for this file is what `npm install`
 * does after the packages are in: its `prepare` script, the whole build from nothing, run here as
 * npm runs it (`npm run prepare`, npm's PATH and environment), with the checkout's packages found
 * in a node_modules folder beside the clone (Node, the compiler and npm's PATH look for
 * node_modules in every parent folder), so that the clone itself holds only what git gave it and
 * what the build wrote.
 */
describe('the way in after npm install: ./bin/run.js from a fresh clone (README: Start it)', function () {
  this.timeout(10 * 60_000);
  /** The folder the clone is in, with node_modules beside it. */
  let home = '';
  let clone = '';

  before(function () {
    home = tempDir('svcq-way-in-');
    clone = path.join(home, 'svcq');
    execFileSync('git', ['clone', '--quiet', '--no-hardlinks', REPO, clone]);
    symlinkSync(path.join(REPO, 'node_modules'), path.join(home, 'node_modules'), 'dir');
    const prepare = spawnSync('npm', ['run', 'prepare'], { cwd: clone, encoding: 'utf8', env: { ...process.env, npm_config_loglevel: 'error' } });
    expect(prepare.status, prepare.stdout + prepare.stderr).to.equal(0);
  });

  after(() => cleanupTemp(home));

  it("npm install's build (prepare) builds what ./bin/run.js runs (the bundle and the manifest), and git sees nothing changed", () => {
    const built = files(path.join(clone, 'dist'));
    expect(built.has(path.join('cli', 'run.js'))).to.equal(true);
    expect(built.has(path.join('cli', 'server-worker.js'))).to.equal(true);
    expect(statSync(path.join(clone, 'oclif.manifest.json')).isFile()).to.equal(true);
    expect(execFileSync('git', ['status', '--porcelain'], { cwd: clone, encoding: 'utf8' })).to.equal('');
  });

  it('its first calls, --version and a server to its listening line, build nothing: dist/ and the manifest are as npm install left them', async () => {
    const before = files(path.join(clone, 'dist'));
    const manifest = statSync(path.join(clone, 'oclif.manifest.json')).mtimeMs;

    const version = spawnSync(path.join(clone, 'bin/run.js'), ['--version'], { cwd: clone, encoding: 'utf8' });
    expect(version.status).to.equal(0);
    expect(version.stdout).to.match(/^svcq\/\S+ /);

    // The README's first command after npm install, in its own folder.
    const serve = spawn(path.join(clone, 'bin/run.js'), ['serve', '--root', './data', '--port', '0'], { cwd: clone, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    serve.stderr.on('data', (c: Buffer) => (out += c.toString()));
    await new Promise<void>((resolve, reject) => {
      serve.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        if (out.includes('listening on')) resolve();
      });
      serve.once('exit', (code) => reject(new Error(`svcq serve exited ${code} before it listened: ${out}`)));
    });
    const stopped = new Promise((resolve) => serve.once('exit', resolve));
    serve.kill('SIGTERM');
    expect(await stopped).to.equal(0);

    expect(files(path.join(clone, 'dist'))).to.deep.equal(before);
    expect(statSync(path.join(clone, 'oclif.manifest.json')).mtimeMs).to.equal(manifest);
  });
});
