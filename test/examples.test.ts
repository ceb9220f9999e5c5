import { cpSync, existsSync, readFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { fencedBlocks, freePort, markedBlocks, normalise, runBlocks, startBackground, type Block, type Started } from './docs/doc-blocks.js';
import { REPO, cleanupTemp, tempDir } from './support/server.js';

/**
 * The path a newcomer takes: README.md's start command, then the walkthrough of
 * examples/README.md (twice: a second try must work as well as the first), then the README's own
 * tour and HTTP calls, then the examples of docs/ (http.md's walk through an item's life,
 * browsers.md, operators.md, reference.md, behaviour.md, scheduling.md, retries.md, flow-control.md), all against the one
 * server the README started, each document in a terminal of its own. The only changes to what a
 * reader pastes: a free port instead
 * of 8080 everywhere (the README's server gets it as SVCQ_PORT, and its commands as SVCQ_URL, the
 * defaults it stands for), and temp folders instead of the repository root and /tmp/svcq-demo.
 */
describe('README.md, then examples/README.md, then the examples of docs/, in order (STYLE: examples are executable and tested)', function () {
  this.timeout(90_000);

  const readme = readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const walkthrough = readFileSync(path.join(REPO, 'examples/README.md'), 'utf8');
  const httpDoc = readFileSync(path.join(REPO, 'docs/http.md'), 'utf8');
  const browsersDoc = readFileSync(path.join(REPO, 'docs/browsers.md'), 'utf8');
  const readmeBlocks = markedBlocks(readme, 'readme');
  let work = '';
  let demo = '';
  let port = 0;
  let env: NodeJS.ProcessEnv = {};
  let adapt = (code: string): string => code;
  let server: Started | undefined;
  const workers: Started[] = [];

  before(async () => {
    work = tempDir('svcq-path-');
    demo = tempDir('svcq-demo-');
    // The repository root, as far as the documents use it: the examples folder beside ./data.
    cpSync(path.join(REPO, 'examples'), path.join(work, 'examples'), { recursive: true });
    // ./bin/run.js as the documents write it: this checkout's, run through a link to its bin/.
    symlinkSync(path.join(REPO, 'bin'), path.join(work, 'bin'));
    port = await freePort();
    adapt = (code) => code.replaceAll('8080', String(port)).replaceAll('/tmp/svcq-demo', demo);
    env = { ...process.env };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_')) delete env[key];
  });

  after(async () => {
    for (const s of [...workers, ...(server ? [server] : [])]) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGKILL');
    cleanupTemp(work);
    cleanupTemp(demo);
  });

  it("starts the server with the README's command, and it listens where the README says", async () => {
    const start = readmeBlocks[0]!;
    expect(start.kind).to.equal('background');
    expect(start.code.trim()).to.equal('./bin/run.js serve --root ./data');
    expect(readme).to.contain('`listening on http://127.0.0.1:8080`');
    server = await startBackground({ ...start, code: adapt(start.code) }, work, { ...env, SVCQ_PORT: String(port) });
    expect(server.output()).to.contain(`listening on http://127.0.0.1:${port}`);
    expect(existsSync(path.join(work, 'data/_svcq/master-token'))).to.equal(true);
    // The walkthrough's server is this one: if it shows a start command, it is the README's.
    const serveLines = fencedBlocks(walkthrough).flatMap((b) => b.code.split('\n')).filter((l) => l.includes(' serve'));
    expect(serveLines).to.deep.equal(['./bin/run.js serve --root ./data']);
  });

  const walk = async (name: string): Promise<{ stdout: string; stderr: string }> => {
    expect(server, 'the README server runs').to.not.equal(undefined);
    const blocks = markedBlocks(walkthrough, 'walkthrough').map((b): Block => ({ ...b, code: adapt(b.code) }));
    expect(blocks.map((b) => b.kind)).to.include.members(['run', 'background']);
    const run = await runBlocks(blocks, { cwd: work, env, dir: demo, name });
    workers.push(...run.started);
    const logs = [server!, ...run.started].map((s) => s.output()).join('\n---\n');
    expect(run.code, `walkthrough failed:\n${run.stdout}\n${run.stderr}\n${logs}`).to.equal(0);
    return run;
  };

  it('runs the walkthrough, pasted block by block, against that server', async () => {
    const { stdout, stderr } = await walk('walkthrough');
    // What the reader is told to expect.
    expect(stdout).to.match(/"svc-user-name":"alice","tokenSha256":"[0-9a-f]{64}"/);
    expect(stdout).to.contain('4 put, 0 deleted, 0 unchanged');
    expect(stdout).to.match(/status +finished\n[\s\S]*result +\{"echo":\{"text":"hello"\},"id":"[0-9a-f]{16}"\}/);
    expect(stderr, stderr).to.contain("svcq: rejected: /width: must have required property 'width'");
    expect(stderr).to.contain('svcq: not found (wrong token, host or queue?)');
    expect(stdout).to.contain('(rejected by the schema, as expected)');
    expect(stdout).to.contain('(bob may not post, as expected)');
    expect(stdout).to.match(/progress +\{"percent":100\}\nresult +\{"thumbnail":"dog-128.png","width":128\}/);
  });

  it('runs the walkthrough again from the top: a second try works too', async () => {
    const { stdout } = await walk('again');
    expect(stdout).to.contain('1 put, 0 deleted, 3 unchanged'); // alice's fresh token
    expect(stdout).to.match(/status +finished\n[\s\S]*result +\{"echo":\{"text":"hello"\},"id":"[0-9a-f]{16}"\}/);
    expect(stdout).to.match(/progress +\{"percent":100\}\nresult +\{"thumbnail":"dog-128.png","width":128\}/);
  });

  it("runs the README's tour of the command line and its three HTTP calls, and each prints what the README shows", async () => {
    expect(server, 'the README server runs').to.not.equal(undefined);
    const [start, ...rest] = readmeBlocks;
    expect(start!.kind).to.equal('background');
    const blocks = rest.map((b): Block => ({ ...b, code: adapt(b.code) }));
    expect(blocks.map((b) => b.kind)).to.deep.equal(['run', 'run', 'run']);
    // The commands use the default URL, which names port 8080: they get the test's port as SVCQ_URL.
    const run = await runBlocks(blocks, { cwd: work, env: { ...env, SVCQ_URL: `http://127.0.0.1:${port}` }, dir: demo, name: 'readme' });
    expect(run.code, `README failed:\n${run.stdout}\n${run.stderr}\n${server!.output()}`).to.equal(0);
    // The item as `svcq item` prints it: times and the seconds it took are the reader's own.
    const times = (text: string): string => normalise(text).replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, '<time>').replace(/\(\d+\.\d s after/, '(<s> after');
    expect(times(run.perBlock[1]!)).to.equal(times(blocks[1]!.prints!));
    expect(normalise(run.perBlock[2]!)).to.equal(normalise(blocks[2]!.prints!));
  });

  /**
   * Runs every block of a document marked with `tag`, in one terminal, and checks each prints what
   * the document shows: the same text, or with `as: 'shape'` JSON with the same fields (for
   * answers whose figures depend on what ran before).
   */
  const runDoc = async (doc: string, tag: string, as: 'text' | 'shape' = 'text'): Promise<{ blocks: Block[]; perBlock: string[] }> => {
    expect(server, 'the README server runs').to.not.equal(undefined);
    // Nothing in the document escapes the test: every shell or JS block is marked to run.
    for (const b of fencedBlocks(doc)) if (b.lang === 'sh' || b.lang === 'js') expect(b.marked, b.code).to.match(new RegExp(`^${tag}: (run|node)$`));
    const blocks = markedBlocks(doc, tag).map((b): Block => ({ ...b, code: adapt(b.code) }));
    // Every shell block shows what it prints.
    for (const b of blocks) if (b.kind === 'run') expect(b.prints, b.code).to.be.a('string');
    const run = await runBlocks(blocks, { cwd: work, env, dir: demo, name: tag });
    expect(run.code, `${tag} failed:\n${run.stdout}\n${run.stderr}\n${server!.output()}`).to.equal(0);
    blocks.forEach((b, i) => {
      if (b.prints === undefined) return;
      if (as === 'shape') expect(shapeOf(run.perBlock[i]!), `block ${i}:\n${b.code}\n${run.perBlock[i]}`).to.deep.equal(shapeOf(b.prints));
      else expect(normalise(run.perBlock[i]!), `block ${i}:\n${b.code}`).to.equal(normalise(b.prints));
    });
    return { blocks, perBlock: run.perBlock };
  };

  it('runs every block of docs/http.md, in order, and each prints what the page shows', async () => {
    const { blocks } = await runDoc(httpDoc, 'http');
    expect(blocks.length).to.be.greaterThan(8);
  });

  it('runs every block of docs/browsers.md, in order, and each prints what the page shows', async () => {
    const { blocks, perBlock } = await runDoc(browsersDoc, 'browsers');
    // The page's fetch, run by Node: what its comment says it logs.
    const node = blocks.findIndex((b) => b.kind === 'node');
    expect(node).to.be.greaterThan(0);
    expect(normalise(perBlock[node]!)).to.equal("{ ok: true, id: '<id>', status: 'pending' }");
  });

  it('runs the curl block of docs/operators.md, and the answer has the fields the page shows (decisions §5.1)', async () => {
    await runDoc(readFileSync(path.join(REPO, 'docs/operators.md'), 'utf8'), 'operators', 'shape');
  });

  it('runs the blocks of docs/reference.md: tokenSha256 is the sha256 of the token as sent, and a claim whose criteria name an unknown operator claims nothing (interface §4.3: fails closed)', async () => {
    const { perBlock } = await runDoc(readFileSync(path.join(REPO, 'docs/reference.md'), 'utf8'), 'reference');
    const [hash, definition] = perBlock[0]!.trim().split('\n');
    expect(JSON.parse(definition!)).to.deep.equal({ 'svc-user-name': 'dave', tokenSha256: hash });
  });

  it('runs the curl block of docs/behaviour.md: a second post with the same Idempotency-Key answers with the first item (decisions §3.5)', async () => {
    const { perBlock } = await runDoc(readFileSync(path.join(REPO, 'docs/behaviour.md'), 'utf8'), 'behaviour');
    const [first, second] = perBlock[0]!.trim().split('\n');
    expect(second).to.equal(first);
  });

  it('runs the curl blocks of docs/scheduling.md: a delayed item waits with its runAt, a higher priority is claimed first, a bad option creates nothing (decisions §8.1); a schedule posts its items and the view shows next and last (decisions §8.3)', async () => {
    const { perBlock } = await runDoc(readFileSync(path.join(REPO, 'docs/scheduling.md'), 'utf8'), 'scheduling');
    const record = JSON.parse(perBlock[2]!) as { postedAt: number; runAt: number };
    expect(record.runAt).to.equal(record.postedAt + 3_600_000);
    const [view, item] = perBlock[6]!.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    const beat = (view!.schedules as Array<{ next: number; last: number; lastId: string }>)[0]!;
    expect(beat.next - beat.last).to.equal(1000);
    expect(item).to.include({ id: beat.lastId, postedBy: 'schedule:beat' });
    expect(item!.postedAt as number).to.be.within(beat.last, beat.last + 1000);
  });

  it('runs the curl blocks of docs/retries.md: exponential backoff, retryIn, final and release (decisions §8.2)', async () => {
    const { perBlock } = await runDoc(readFileSync(path.join(REPO, 'docs/retries.md'), 'utf8'), 'retries');
    const record = JSON.parse(perBlock[0]!.trim().split('\n')[2]!) as { updatedAt: number; runAt: number };
    expect(record.runAt - record.updatedAt).to.equal(10_000);
  });

  it('runs the curl blocks of docs/flow-control.md: a claim held by maxActive answered when a lease ends, Retry-After under a rate limit, fair turns among groups, a dead letter and its redrive, bulk cancel and retry, svcq retry (decisions §8.5, §8.6)', async () => {
    await runDoc(readFileSync(path.join(REPO, 'docs/flow-control.md'), 'utf8'), 'flow');
  });

  it('stops: Ctrl-C in each worker terminal, then in the server terminal', async () => {
    for (const w of workers) {
      w.proc.kill('SIGINT');
      expect(await w.exited, w.output()).to.equal(0);
    }
    server!.proc.kill('SIGINT');
    expect(await server!.exited, server!.output()).to.equal(0);
  });
});

/** The fields of each JSON line of `text`, nested, without their values: what an answer shows whatever its figures. */
function shapeOf(text: string): unknown[] {
  const shape = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.length > 0 ? [shape(v[0])] : [];
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, shape(x)]));
    return 'value';
  };
  return text.trim().split('\n').map((line) => shape(JSON.parse(line)));
}
