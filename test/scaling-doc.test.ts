import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import pg from 'pg';
import { fencedBlocks, freePort, markedBlocks, runBlocks, section, type Block, type Started } from './docs/doc-blocks.js';
import { REPO, cleanupTemp, tempDir } from './support/server.js';
import { postgresPresent, postgresUnderTest } from './store/support/stores.js';

/**
 * docs/scaling.md's "Run several nodes", pasted block by block: a database made with createdb,
 * three nodes on it, definitions pushed through one, an item posted through another and worked
 * through the third, then read back through the first (decisions §6.1); then the page's nginx
 * in front of them and its Prometheus targets scraped. The only changes to what a reader pastes:
 * free ports for the page's, and a database of the test's own
 * on the server of SVCQ_TEST_PG_URL.
 */
const doc = readFileSync(path.join(REPO, 'docs/scaling.md'), 'utf8');
const setup = section(doc, 'Run several nodes');
const blocks = markedBlocks(setup, 'scaling');
const fenced = fencedBlocks(setup);
const nginxConf = fenced.find((b) => b.lang === 'nginx')!.code;
const scrape = fenced.find((b) => b.lang === 'yaml')!.code;
/** The ports of the nodes, as their start commands give them. */
const nodePorts = blocks.filter((b) => b.kind === 'background').map((b) => /--port (\d+)/.exec(b.code)![1]!);
const balancerPort = /listen 127\.0\.0\.1:(\d+);/.exec(nginxConf)?.[1];
const targets = [...scrape.matchAll(/'([^']+)'/g)].map((m) => m[1]!);

describe('docs/scaling.md "Run several nodes": what the page asks of the reader holds together (decisions §6.1)', () => {
  it('starts three nodes, each on a port of its own, the balancer on another, and neither on the port the README\'s first server keeps', () => {
    const readme = readFileSync(path.join(REPO, 'README.md'), 'utf8');
    const first = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(readme)![1]!;
    expect(nodePorts).to.have.length(3);
    expect(balancerPort, 'nginx listens on 127.0.0.1:PORT').to.be.a('string');
    const ports = [first, ...nodePorts, balancerPort!];
    expect(new Set(ports).size, ports.join(', ')).to.equal(ports.length);
  });

  it('puts every node behind nginx and keeps idle connections to them open: keepalive with HTTP/1.1 and an empty Connection header', () => {
    const upstream = /upstream svcq \{([^}]*)\}/.exec(nginxConf)![1]!;
    expect([...upstream.matchAll(/server 127\.0\.0\.1:(\d+);/g)].map((m) => m[1])).to.deep.equal(nodePorts);
    expect(upstream).to.match(/^\s*keepalive \d+;$/m);
    const location = /location \/ \{([^}]*)\}/.exec(nginxConf)![1]!;
    expect(location).to.match(/^\s*proxy_http_version 1\.1;$/m);
    expect(location).to.match(/^\s*proxy_set_header Connection "";$/m);
    expect(location).to.match(/^\s*proxy_set_header Host \$host;$/m);
    // Longer than the longest long poll (30 s, decisions §3.3).
    expect(Number(/proxy_read_timeout (\d+)s;/.exec(location)![1])).to.be.greaterThan(30);
  });

  it('has Prometheus scrape every node, not the load balancer (each node counts its own: rate() over a balanced series means nothing)', () => {
    expect(targets).to.deep.equal(nodePorts.map((p) => `127.0.0.1:${p}`));
    expect(targets).to.not.include(`127.0.0.1:${balancerPort}`);
    expect(scrape).to.match(/metrics_path: \/api\/v2\/metrics/);
  });

  it('leaves what the setup writes in the checkout (the token file and each node\'s --root) out of git by .gitignore', () => {
    const written = [
      ...blocks.flatMap((b) => [...b.code.matchAll(/> ([\w./-]+)\)?$/gm)].map((m) => m[1]!)),
      ...blocks.flatMap((b) => [...b.code.matchAll(/--root \.\/(\S+)/g)].map((m) => `${m[1]}/`)),
    ];
    expect(written).to.deep.equal(['master-token', 'node1/', 'node2/', 'node3/']);
    for (const file of written) {
      const check = spawnSync('git', ['check-ignore', '--no-index', '-q', file], { cwd: REPO });
      expect(check.status, `${file} is ignored`).to.equal(0);
    }
  });
});

const target = await postgresUnderTest();
const createdb = spawnSync('sh', ['-c', 'command -v createdb'], { encoding: 'utf8' }).status === 0;
const nginx = spawnSync('sh', ['-c', 'command -v nginx'], { encoding: 'utf8' }).status === 0;

describe('docs/scaling.md "Run several nodes", in order (decisions §6.1; STYLE: examples are executable and tested)', function () {
  this.timeout(90_000);
  if (!postgresPresent(target)) return;
  if (!createdb) {
    before(function () {
      console.log('    skipped: no createdb command on this machine (PostgreSQL client tools)');
      this.skip();
    });
    return;
  }

  const name = `svcq_doc_${process.pid}_${randomBytes(3).toString('hex')}`;
  const base = new URL(target.url);
  const admin = (): pg.Client => {
    const u = new URL(target.url);
    u.pathname = '/postgres';
    return new pg.Client({ connectionString: u.toString() });
  };
  let work = '';
  let started: Started[] = [];
  let ports: number[] = [];
  let adapt = (code: string): string => code;
  let env: NodeJS.ProcessEnv = {};
  let id = '';

  before(async () => {
    work = tempDir('svcq-scaling-');
    cpSync(path.join(REPO, 'examples'), path.join(work, 'examples'), { recursive: true });
    // ./bin/run.js as the page writes it: this checkout's, run through a link to its bin/.
    symlinkSync(path.join(REPO, 'bin'), path.join(work, 'bin'));
    ports = await Promise.all([...nodePorts, balancerPort!].map(() => freePort()));
    const url = new URL(target.url);
    url.pathname = `/${name}`;
    adapt = (code) => {
      let out = code
        .replaceAll('-h 127.0.0.1 -U postgres svcq_jobs', `-h ${base.hostname} -p ${base.port || '5432'} -U ${decodeURIComponent(base.username) || 'postgres'} ${name}`)
        .replaceAll('postgres://postgres@127.0.0.1:5432/svcq_jobs', url.toString());
      [...nodePorts, balancerPort!].forEach((port, i) => (out = out.replaceAll(`:${port}`, `:${ports[i]}`).replaceAll(`--port ${port}`, `--port ${ports[i]}`)));
      return out;
    };
    env = { ...process.env };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_')) delete env[key];
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
    const adapted = blocks.map((b): Block => ({ ...b, code: adapt(b.code) }));
    expect(adapted.map((b) => b.kind)).to.deep.equal(['run', 'background', 'background', 'background', 'run']);
    const run = await runBlocks(adapted, { cwd: work, env, dir: work, name: 'scaling' });
    started = run.started;
    const logs = run.started.map((s) => s.output()).join('\n---\n');
    expect(run.code, `the section failed:\n${run.stdout}\n${run.stderr}\n${logs}`).to.equal(0);
    expect(run.started.map((s) => s.output())).to.satisfy((outs: string[]) => outs.every((o, i) => o.includes(`listening on http://127.0.0.1:${ports[i]}`)));
    const last = run.perBlock[4]!;
    expect(last).to.contain('4 put, 0 deleted, 0 unchanged');
    expect(last).to.match(/"event":"finished","id":"[0-9a-f]{16}"/);
    expect(last).to.match(/status +finished\n/);
    expect(last).to.match(/result +\{"echo":\{"text":"hello"\},"id":"[0-9a-f]{16}"\}/);
    id = /^id +([0-9a-f]{16})$/m.exec(last)![1]!;
    // The nodes kept it in the database the section made, not under their roots.
    const url = new URL(target.url);
    url.pathname = `/${name}`;
    const db = new pg.Client({ connectionString: url.toString() });
    await db.connect();
    try {
      const rows = (await db.query('SELECT queue, status FROM svcq_items')).rows;
      expect(rows).to.deep.equal([{ queue: 'jobs.example.com/public-echo', status: 'finished' }]);
    } finally {
      await db.end();
    }
  });

  it('answers the Prometheus scrape of every target the page lists, with the master token, each with the shared store\'s gauges', async () => {
    expect(id, 'the nodes run').to.not.equal('');
    const token = readFileSync(path.join(work, 'master-token'), 'utf8').trim();
    for (const t of targets) {
      const res = await fetch(`http://${adapt(t)}/api/v2/metrics`, { headers: { authorization: `Bearer ${token}` } });
      expect(res.status, t).to.equal(200);
      expect(await res.text()).to.match(/^svcq_items\{host="jobs\.example\.com",queue="public-echo",status="finished"\} 1$/m);
    }
  });

  it('reads the item back through the page\'s nginx in front of the nodes, where nginx is installed', async function () {
    if (!nginx) {
      console.log('      nginx is not installed (apt-get install nginx-light): skipping the load balancer');
      this.skip();
    }
    expect(id, 'the nodes run').to.not.equal('');
    // The page's snippet goes inside the http block of a configuration of the test's own.
    const prefix = path.join(work, 'nginx');
    mkdirSync(path.join(prefix, 'logs'), { recursive: true });
    const conf = path.join(prefix, 'nginx.conf');
    writeFileSync(conf, `pid ${prefix}/nginx.pid;\nerror_log ${prefix}/logs/error.log;\nevents {}\nhttp {\naccess_log off;\nclient_body_temp_path ${prefix}/body;\nproxy_temp_path ${prefix}/proxy;\n${adapt(nginxConf)}}\n`);
    const proc = spawn('nginx', ['-p', prefix, '-c', conf, '-g', 'daemon off;'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
    try {
      // Ready once it answers: any answer from a node through it.
      const balancer = `http://127.0.0.1:${ports[3]}`;
      const deadline = Date.now() + 10_000;
      for (;;) {
        expect(proc.exitCode, out).to.equal(null);
        const answered = await fetch(`${balancer}/api/version`).then(() => true, () => false);
        if (answered) break;
        if (Date.now() > deadline) throw new Error(`nginx did not answer on ${balancer}:\n${out}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const shown = markedBlocks(setup, 'nginx').map((b): Block => ({ ...b, code: adapt(b.code) }));
      expect(shown.map((b) => b.kind)).to.deep.equal(['run']);
      const run = await runBlocks(shown, { cwd: work, env: { ...env, SVCQ_HOST: 'jobs.example.com', id }, dir: work, name: 'nginx' });
      expect(run.code, `${run.stdout}\n${run.stderr}\n${out}`).to.equal(0);
      expect(run.stdout).to.match(new RegExp(`^id +${id}\n`, 'm'));
      expect(run.stdout).to.match(/status +finished\n/);
    } finally {
      proc.kill('SIGTERM');
      await exited;
    }
  });
});
