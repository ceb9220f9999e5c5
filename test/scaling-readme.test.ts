import { spawnSync } from 'node:child_process';
import { cpSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import pg from 'pg';
import { freePort, markedBlocks, runBlocks, section, type Block, type Started } from './docs/doc-blocks.js';
import { BIN, REPO, cleanupTemp, tempDir } from './support/server.js';
import { postgresPresent, postgresUnderTest } from './store/support/stores.js';

/**
 * README.md's "Scaling out", pasted block by block: a database made with createdb, three nodes on
 * it, definitions pushed through one, an item posted through another and worked through the
 * third, then read back through the first (decisions §6.1). The only changes to what a reader
 * pastes: the built binary for `npx svcq`, free ports for 8081–8083, and a database of the test's
 * own on the server of SVCQ_TEST_PG_URL.
 */
const target = await postgresUnderTest();
const createdb = spawnSync('sh', ['-c', 'command -v createdb'], { encoding: 'utf8' }).status === 0;

describe('README.md "Scaling out", in order (decisions §6.1; STYLE: examples are executable and tested)', function () {
  this.timeout(90_000);
  if (!postgresPresent(target)) return;
  if (!createdb) {
    before(function () {
      console.log('    skipped: no createdb command on this machine (PostgreSQL client tools)');
      this.skip();
    });
    return;
  }

  const name = `svcq_readme_${process.pid}_${randomBytes(3).toString('hex')}`;
  const base = new URL(target.url);
  const admin = (): pg.Client => {
    const u = new URL(target.url);
    u.pathname = '/postgres';
    return new pg.Client({ connectionString: u.toString() });
  };
  let work = '';
  let started: Started[] = [];

  before(() => {
    work = tempDir('svcq-scaling-');
    cpSync(path.join(REPO, 'examples'), path.join(work, 'examples'), { recursive: true });
  });
  after(async () => {
    for (const s of started) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGTERM');
    await Promise.all(started.map((s) => s.exited));
    const client = admin();
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`).finally(() => client.end());
    cleanupTemp(work);
  });

  it('makes the database, starts three nodes on it, and an item posted through one node is worked through another and read back through a third', async () => {
    const readme = readFileSync(path.join(REPO, 'README.md'), 'utf8');
    const text = section(readme, 'Scaling out');
    const ports = await Promise.all([freePort(), freePort(), freePort()]);
    const url = new URL(target.url);
    url.pathname = `/${name}`;
    const adapt = (code: string): string => {
      let out = code
        .replaceAll('npx svcq', `"${process.execPath}" "${BIN}"`)
        .replaceAll('-h 127.0.0.1 -U postgres svcq_jobs', `-h ${base.hostname} -p ${base.port || '5432'} -U ${decodeURIComponent(base.username) || 'postgres'} ${name}`)
        .replaceAll('postgres://postgres@127.0.0.1:5432/svcq_jobs', url.toString());
      ports.forEach((port, i) => (out = out.replaceAll(`808${i + 1}`, String(port))));
      return out;
    };
    const blocks = markedBlocks(text, 'scaling').map((b): Block => ({ ...b, code: adapt(b.code) }));
    expect(blocks.map((b) => b.kind)).to.deep.equal(['run', 'background', 'background', 'background', 'run']);
    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_')) delete env[key];
    const run = await runBlocks(blocks, { cwd: work, env, dir: work, name: 'scaling' });
    started = run.started;
    const logs = run.started.map((s) => s.output()).join('\n---\n');
    expect(run.code, `the section failed:\n${run.stdout}\n${run.stderr}\n${logs}`).to.equal(0);
    expect(run.started.map((s) => s.output())).to.satisfy((outs: string[]) => outs.every((o, i) => o.includes(`listening on http://127.0.0.1:${ports[i]}`)));
    const last = run.perBlock[4]!;
    expect(last).to.contain('4 put, 0 deleted, 0 unchanged');
    expect(last).to.match(/"event":"finished","id":"[0-9a-f]{16}"/);
    expect(last).to.match(/status +finished\n/);
    expect(last).to.match(/result +\{"echo":\{"text":"hello"\},"id":"[0-9a-f]{16}"\}/);
    // The nodes kept it in the database the section made, not under their roots.
    const db = new pg.Client({ connectionString: url.toString() });
    await db.connect();
    try {
      const rows = (await db.query("SELECT queue, status FROM svcq_items")).rows;
      expect(rows).to.deep.equal([{ queue: 'jobs.example.com/public-echo', status: 'finished' }]);
    } finally {
      await db.end();
    }
  });
});
