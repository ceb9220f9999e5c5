import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { freshDatabase, suiteDatabase } from '../store/support/stores.js';
import { runCli } from '../support/cli.js';
import { cleanupTemp, startServer, tempDir } from '../support/server.js';

/**
 * The nodes of one PostgreSQL database share one master token (decisions §6.1: "every node started
 * with that URL and the same master token"): the first node records its token's sha256, and a node
 * that would answer management calls with another one is refused at start, since one call in
 * three through a load balancer would meet the wall there.
 */
describe('the master token the nodes of a shared database agree on (decisions §6.1)', function () {
  this.timeout(60_000);
  const roots: string[] = [];
  const db = suiteDatabase({ tearDown: async () => roots.forEach((r) => cleanupTemp(r)) });
  const root = (): string => {
    roots.push(tempDir('svcq-shared-token-'));
    return roots.at(-1)!;
  };
  const serve = (at: string, args: string[] = [], token?: string): ReturnType<typeof runCli> =>
    runCli(['serve', '--root', at, '--port', '0', '--store', db().url, ...args], { env: { SVCQ_MASTER_TOKEN: token ?? '' }, timeoutMs: 30_000 });


  it('the first node records its token; a node with none is refused and makes no file; one with another is refused; one with the same starts; --replace-master-token changes it', async () => {
    const first = await startServer({ root: root(), masterToken: 'token-of-the-nodes', args: ['--store', db().url] });
    try {
      const bare = root();
      const none = await serve(bare);
      expect(none.code).to.equal(1);
      expect(none.stderr).to.match(/^svcq: cannot start: the nodes of this database share a master token, and this node has none \(no --master-token, SVCQ_MASTER_TOKEN or .*master-token\): give it the nodes' token/m);
      expect(existsSync(path.join(bare, '_svcq', 'master-token')), 'a token file made by a refused start').to.equal(false);

      const other = await serve(root(), [], 'another-token');
      expect(other.code).to.equal(1);
      expect(other.stderr).to.match(/^svcq: cannot start: this node's master token \(from --master-token or SVCQ_MASTER_TOKEN\) is not the one the other nodes of this database share: give it theirs; to change the nodes' token, stop every node and start one with --replace-master-token$/m);

      const same = await startServer({ root: root(), masterToken: 'token-of-the-nodes', args: ['--store', db().url] });
      await same.stop();
    } finally {
      await first.stop();
    }
    const replaced = await startServer({ root: root(), masterToken: 'the-new-token', args: ['--store', db().url, '--replace-master-token'] });
    await replaced.stop();
    const old = await serve(root(), [], 'token-of-the-nodes');
    expect(old.code, 'the old token after a replacement').to.equal(1);
    const renewed = await startServer({ root: root(), masterToken: 'the-new-token', args: ['--store', db().url] });
    await renewed.stop();
  });

  it('a node whose token file another node does not share is refused, and its file (made before) is left as it is', async () => {
    const at = root();
    // A file made by a start of its own on another database.
    const elsewhere = await freshDatabase(db().base);
    try {
      await (await startServer({ root: at, masterToken: '', args: ['--store', elsewhere.url] })).stop();
    } finally {
      await elsewhere.drop();
    }
    const file = path.join(at, '_svcq', 'master-token');
    const own = readFileSync(file, 'utf8');
    const run = await serve(at);
    expect(run.code).to.equal(1);
    expect(run.stderr).to.include(`this node's master token (from ${file}) is not the one the other nodes of this database share`);
    expect(readFileSync(file, 'utf8')).to.equal(own);
  });
});
