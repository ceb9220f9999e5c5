import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { AppendFile } from '../../src/store/append-file.js';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { newQueue, QueueApi } from '../http/queue-api.js';

const HOST = 'prealloc.example.com';

/** The file's bytes up to its first NUL: what a reader of a preallocated file takes as its data. */
function dataOf(file: string): string {
  const bytes = readFileSync(file);
  const nul = bytes.indexOf(0);
  return bytes.subarray(0, nul === -1 ? bytes.length : nul).toString('utf8');
}

function newestJournal(root: string): string {
  const dir = path.join(root, '_svcq', 'store');
  const newest = Math.max(...readdirSync(dir).map((f) => Number(/^journal-(\d+)\.jsonl$/.exec(f)?.[1] ?? -1)));
  expect(newest, `no journal in ${dir}`).to.be.at.least(0);
  return path.join(dir, `journal-${newest}.jsonl`);
}

describe('an append file kept zero-filled ahead of its data', () => {
  let dir: string;
  beforeEach(() => {
    dir = tempDir();
  });
  afterEach(() => cleanupTemp(dir));

  it('writes zeros ahead of the data while open, appends right after the data, and cuts the zeros off on close', async () => {
    const file = path.join(dir, 'j.jsonl');
    const f = await AppendFile.open(file, { preallocate: 4 << 20 });
    await f.append('["a"]\n');
    await Promise.all([f.append('["b"]\n'), f.append('["c"]\n')]);
    expect(statSync(file).size, 'zeros are written ahead').to.be.at.least(1 << 20);
    expect(dataOf(file)).to.equal('["a"]\n["b"]\n["c"]\n');
    expect(f.size).to.equal(18);
    await f.close();
    expect(readFileSync(file, 'utf8')).to.equal('["a"]\n["b"]\n["c"]\n');
  });

  it('reopened after a crash left zeros behind, goes on right after the last byte of data, not after the zeros', async () => {
    const file = path.join(dir, 'j.jsonl');
    writeFileSync(file, Buffer.concat([Buffer.from('["a"]\n["b"]\n'), Buffer.alloc(100_000)]));
    const f = await AppendFile.open(file, { preallocate: 4 << 20 });
    expect(f.size).to.equal(12);
    await f.append('["c"]\n');
    expect(dataOf(file)).to.equal('["a"]\n["b"]\n["c"]\n');
    await f.close();
    expect(readFileSync(file, 'utf8')).to.equal('["a"]\n["b"]\n["c"]\n');
  });

  it('without the option behaves as a plain append file: no zeros, ever', async () => {
    const file = path.join(dir, 'plain.log');
    const f = await AppendFile.open(file);
    await f.append('one\n');
    expect(statSync(file).size).to.equal(4);
    await f.close();
    expect(readFileSync(file, 'utf8')).to.equal('one\n');
  });
});

describe('the embedded store with a preallocated journal after kill -9 (decisions §6)', function () {
  this.timeout(30_000);
  let root: string;
  let server: TestServer | undefined;
  before(() => {
    root = tempDir();
  });
  after(async () => {
    await server?.stop();
    cleanupTemp(root);
  });

  it('reads the journal up to its zeros, skips a torn record just before them with one warning, and appends after the last good record (decisions §6)', async () => {
    server = await startServer({ root });
    let q = await newQueue(server, HOST);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await q.post({ i }));
    expect((await q.claim()).id).to.equal(ids[0]);
    await q.submit(ids[0]!, 'result', { output: 'zero' });
    const before = await Promise.all(ids.map((id) => q.fetch(id)));
    await server.kill9();

    // What kill -9 left: the records, then zeros. Tear a record into the first of the zeros.
    const journal = newestJournal(root);
    const data = dataOf(journal);
    expect(statSync(journal).size, 'zeros after the data').to.be.greaterThan(Buffer.byteLength(data));
    const torn = `["u","${HOST}/${q.name}","abc`;
    const bytes = readFileSync(journal);
    bytes.write(torn, Buffer.byteLength(data));
    writeFileSync(journal, bytes);

    server = await startServer({ root });
    q = new QueueApi(server, HOST, q.name);
    const warnings = server.output().split('\n').filter((line) => /warn/i.test(line));
    expect(warnings, server.output()).to.have.length(1);
    expect(warnings[0]).to.match(/torn/i);
    expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
    const fresh = await q.post({ i: 'after the tear' });
    expect(dataOf(journal)).to.not.include(torn);
    await server.kill9();

    server = await startServer({ root });
    q = new QueueApi(server, HOST, q.name);
    expect(server.output()).to.not.match(/warn/i);
    expect((await q.fetch(fresh)).status).to.equal('pending');
    expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
    expect(await server.stop('SIGTERM')).to.equal(0);
    expect(readFileSync(journal).includes(0), 'a clean stop leaves no zeros').to.equal(false);
  });
});
