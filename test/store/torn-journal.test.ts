import { appendFileSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { newQueue, QueueApi } from '../http/queue-api.js';
import { dataOf } from '../support/files.js';

const HOST = 'torn.example.com';

/** The journal the store appends to: the highest-numbered `journal-N.jsonl`. */
function newestJournal(root: string): string {
  const dir = path.join(root, '_svcq', 'store');
  const numbers = readdirSync(dir)
    .map((f) => /^journal-(\d+)\.jsonl$/.exec(f))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]));
  expect(numbers, `no journal in ${dir}`).to.have.length.greaterThan(0);
  return path.join(dir, `journal-${Math.max(...numbers)}.jsonl`);
}

function warningLines(output: string): string[] {
  return output.split('\n').filter((line) => /warn/i.test(line));
}

describe('the embedded store with a torn journal (decisions §6)', function () {
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

  it('skips a torn last journal record with one warning, starts, keeps every item, and keeps working across another restart (decisions §6)', async () => {
    server = await startServer({ root });
    let q = await newQueue(server, HOST);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await q.post({ i }));
    expect((await q.claim()).id).to.equal(ids[0]);
    await q.submit(ids[0]!, 'result', { output: 'zero' });
    expect((await q.claim()).id).to.equal(ids[1]);
    const before = await Promise.all(ids.map((id) => q.fetch(id)));
    expect(await server.stop('SIGTERM')).to.equal(0);

    const journal = newestJournal(root);
    appendFileSync(journal, `["u","${HOST}/${q.name}","abc`);

    server = await startServer({ root });
    q = new QueueApi(server, HOST, q.name);
    const warnings = warningLines(server.output());
    expect(warnings, server.output()).to.have.length(1);
    expect(warnings[0]).to.match(/torn/i);
    expect(warnings[0]).to.include(path.basename(journal));
    expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);

    const fresh = await q.post({ i: 'after the tear' });
    expect((await q.fetch(fresh)).status).to.equal('pending');
    expect(await server.stop('SIGTERM')).to.equal(0);

    server = await startServer({ root });
    q = new QueueApi(server, HOST, q.name);
    expect(warningLines(server.output()), server.output()).to.deep.equal([]);
    expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
    expect(await q.fetch(fresh)).to.include({ status: 'pending', attempts: 0 });
    expect((await q.claim()).id).to.equal(ids[2]);
  });

  it('skips a corrupt last journal line with one warning and starts with every item (decisions §6)', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    try {
      let q = await newQueue(s, HOST);
      const ids = [await q.post({ i: 0 }), await q.post({ i: 1 })];
      await q.claim();
      const before = await Promise.all(ids.map((id) => q.fetch(id)));
      expect(await s.stop('SIGTERM')).to.equal(0);

      appendFileSync(newestJournal(own), '{"this is": "no record"\n');
      s = await startServer({ root: own });
      q = new QueueApi(s, HOST, q.name);
      const warnings = warningLines(s.output());
      expect(warnings, s.output()).to.have.length(1);
      expect(warnings[0]).to.include(path.basename(newestJournal(own)));
      expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
      await q.post({ i: 2 });
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });

  it('after kill -9 reads the journal up to the zeros written ahead of it, skips a torn record just before them with one warning, and appends after the last good record (decisions §6)', async () => {
    const own = tempDir();
    let s = await startServer({ root: own });
    try {
      let q = await newQueue(s, HOST);
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push(await q.post({ i }));
      expect((await q.claim()).id).to.equal(ids[0]);
      await q.submit(ids[0]!, 'result', { output: 'zero' });
      const before = await Promise.all(ids.map((id) => q.fetch(id)));
      await s.kill9();

      // What kill -9 left: the records, then zeros. Tear a record into the first of the zeros.
      const journal = newestJournal(own);
      const data = dataOf(journal);
      expect(statSync(journal).size, 'zeros after the data').to.be.greaterThan(Buffer.byteLength(data));
      const torn = `["u","${HOST}/${q.name}","abc`;
      const bytes = readFileSync(journal);
      bytes.write(torn, Buffer.byteLength(data));
      writeFileSync(journal, bytes);

      s = await startServer({ root: own });
      q = new QueueApi(s, HOST, q.name);
      const warnings = warningLines(s.output());
      expect(warnings, s.output()).to.have.length(1);
      expect(warnings[0]).to.match(/torn/i);
      expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
      const fresh = await q.post({ i: 'after the tear' });
      expect(dataOf(journal)).to.not.include(torn);
      await s.kill9();

      s = await startServer({ root: own });
      q = new QueueApi(s, HOST, q.name);
      expect(warningLines(s.output()), s.output()).to.deep.equal([]);
      expect((await q.fetch(fresh)).status).to.equal('pending');
      expect(await Promise.all(ids.map((id) => q.fetch(id)))).to.deep.equal(before);
      expect(await s.stop('SIGTERM')).to.equal(0);
      expect(readFileSync(journal).includes(0), 'a clean stop leaves no zeros').to.equal(false);
    } finally {
      await s.stop();
      cleanupTemp(own);
    }
  });
});
