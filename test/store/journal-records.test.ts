import { appendFileSync, readFileSync, write as fsWrite, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { Item } from '../../src/engine/queue.js';
import type { WriteFn } from '../../src/store/append-file.js';
import { GROUP_END, itemRecord, Journal, updateRecord } from '../../src/store/journal.js';
import { tempDirEachTest } from '../support/server.js';
import { dataOf } from '../support/files.js';

const QUEUE = 'jobs.test/work';
const QUEUE_JSON = JSON.stringify(QUEUE);

/** Bodies as a producer may post them: each must come back byte for byte (decisions §6). */
const BODIES = [
  '{"n":1}',
  '{ "spaced" : [ 1 , 2 ] }',
  '{\t"tabbed":\t"a\\tb"}',
  '{"quote":"a \\"b\\" c","slash":"\\\\","unicode":"\\u00e9\\u0000"}',
  '{"raw":"é ü 漢字 🎉"}',
  '{\r"cr":1}',
  '{\n  "pretty": true,\n  "lines": 3\n}',
];

async function load(dir: string): Promise<{ items: Map<string, Item>; warnings: string[] }> {
  const warnings: string[] = [];
  const journal = new Journal({ dir, warn: (line) => warnings.push(line) });
  const { items } = await journal.open();
  await journal.close();
  return { items: items.get(QUEUE) ?? new Map(), warnings };
}

function item(n: number, body: string): Item {
  return new Item(n.toString(16).padStart(16, '0'), n, body, 'alice', 1_700_000_000_000 + n, 'pending');
}

describe('journal records of whole items (decisions §6)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

  it('writes a body as posted after a tab, and reads every body back byte for byte, a pretty-printed one included', async () => {
    const lines = BODIES.map((body, i) => itemRecord(QUEUE_JSON, item(i + 1, body)));
    writeFileSync(path.join(dir, 'journal-0.jsonl'), lines.join(''));
    for (const [i, line] of lines.entries()) {
      if (BODIES[i]!.includes('\n')) expect(line, 'a body with a line break is escaped').to.match(/^\["i",/);
      else expect(line, 'any other body follows a tab unescaped').to.equal(`${line.slice(0, line.indexOf('\t'))}\t${BODIES[i]}\n`);
    }
    const { items, warnings } = await load(dir);
    expect(warnings).to.deep.equal([]);
    expect([...items.values()].map((x) => x.body)).to.deep.equal(BODIES);
    const first = items.get('0000000000000001')!;
    expect([first.ord, first.postedBy, first.postedAt, first.status, first.updatedAt, first.attempts]).to.deep.equal([1, 'alice', 1_700_000_000_001, 'pending', 1_700_000_000_001, 0]);
  });

  it('still reads a store written with every body escaped in the record', async () => {
    const legacy = `["i",${QUEUE_JSON},"00000000000000ff",255,"{\\"old\\":true}","bob",1700000000000,null,"claimed",1700000000500,null,1,"w1",1700000300000,0,null,null,null,null]\n`;
    writeFileSync(path.join(dir, 'journal-0.jsonl'), legacy + itemRecord(QUEUE_JSON, item(256, '{"new":true}')));
    const { items, warnings } = await load(dir);
    expect(warnings).to.deep.equal([]);
    const old = items.get('00000000000000ff')!;
    expect([old.body, old.postedBy, old.status, old.attempts, old.leaseWorker, old.leaseUntil]).to.deep.equal(['{"old":true}', 'bob', 'claimed', 1, 'w1', 1_700_000_300_000]);
    expect(items.get('0000000000000100')!.body).to.equal('{"new":true}');
  });

  it('keeps the whole state of an item that was worked on, and applies later updates to it', async () => {
    const worked = item(7, '{"job":7}');
    worked.idempotencyKey = 'key-7';
    worked.status = 'claimed';
    worked.attempts = 2;
    worked.leaseWorker = 'w\t1';
    worked.leaseUntil = 1_700_000_100_000;
    worked.updatedAt = 1_700_000_050_000;
    worked.progress = '{"pct":50}';
    let text = itemRecord(QUEUE_JSON, worked);
    worked.status = 'finished';
    worked.result = '{"ok":"\\n"}';
    worked.finishedAt = 1_700_000_060_000;
    text += updateRecord(QUEUE_JSON, worked);
    writeFileSync(path.join(dir, 'journal-0.jsonl'), text);
    const back = (await load(dir)).items.get(worked.id)!;
    const fields = (x: Item): unknown[] => [x.body, x.idempotencyKey, x.status, x.attempts, x.leaseWorker, x.leaseUntil, x.updatedAt, x.finishedAt, x.progress, x.result];
    expect(fields(back)).to.deep.equal(fields(worked));
  });

  it('skips a record whose body does not have the length its header gives, with a warning, and keeps the records around it', async () => {
    const good = [item(1, '{"a":1}'), item(2, '{"b":2}'), item(3, '{"c":3}')].map((x) => itemRecord(QUEUE_JSON, x));
    const cut = good[1]!.replace('{"b":2}', '{"b":');
    const file = path.join(dir, 'journal-0.jsonl');
    writeFileSync(file, good[0]! + cut + good[2]!);
    const { items, warnings } = await load(dir);
    expect([...items.keys()]).to.deep.equal(['0000000000000001', '0000000000000003']);
    expect(warnings).to.have.length(1);
    expect(warnings[0]).to.match(/record 2 is corrupt/);
  });

  it('treats a record cut inside its body at the end of the journal as torn: skipped, cut off, and appending goes on after the last good record', async () => {
    const file = path.join(dir, 'journal-0.jsonl');
    const first = itemRecord(QUEUE_JSON, item(1, '{"a":1}'));
    writeFileSync(file, first);
    appendFileSync(file, itemRecord(QUEUE_JSON, item(2, '{"b":"two"}')).slice(0, -5));
    const { items, warnings } = await load(dir);
    expect([...items.keys()]).to.deep.equal(['0000000000000001']);
    expect(warnings.join('\n')).to.match(/torn/);
    // Cut off after the last good record; the group end the store marks there goes with its next write (decisions §6).
    expect(dataOf(file)).to.equal(first);
    expect(readFileSync(file, 'utf8')).to.equal(first);
  });

  it('applies a group only once its group end is read: a last group whose write never finished is dropped whole and cut off, even where each of its records is complete (decisions §6, §3.8: one durable write)', async () => {
    const file = path.join(dir, 'journal-0.jsonl');
    const legacy = itemRecord(QUEUE_JSON, item(1, '{"before":"groups were marked"}'));
    const whole = itemRecord(QUEUE_JSON, item(2, '{"a":2}')) + itemRecord(QUEUE_JSON, item(3, '{"a":3}'));
    // A batch of three whose write a crash cut short after two whole records: no group end after it.
    const cut = itemRecord(QUEUE_JSON, item(4, '{"b":4}')) + itemRecord(QUEUE_JSON, item(5, '{"b":5}')) + itemRecord(QUEUE_JSON, item(6, '{"b":6}')).slice(0, 20);
    writeFileSync(file, legacy + GROUP_END + whole + GROUP_END + cut);
    const { items, warnings } = await load(dir);
    expect([...items.keys()], 'records before the first group end are read as they come; a whole group counts').to.deep.equal(['0000000000000001', '0000000000000002', '0000000000000003']);
    expect(warnings.join('\n')).to.match(/never finished/);
    expect(dataOf(file), 'cut off after the last group end, and a group end marked where appending goes on').to.equal(legacy + GROUP_END + whole + GROUP_END);

    // The same with every record of the unfinished group complete (the write stopped just before its end).
    writeFileSync(file, GROUP_END + whole + GROUP_END + itemRecord(QUEUE_JSON, item(4, '{"b":4}')));
    const again = await load(dir);
    expect([...again.items.keys()]).to.deep.equal(['0000000000000002', '0000000000000003']);
    expect(again.warnings).to.have.length(1);
    expect(again.warnings[0]).to.match(/no group end after its 1 record/);
  });

  it('ends every group it writes with a group end, and starts a journal it opens with one (decisions §6)', async () => {
    const journal = new Journal({ dir, warn: () => undefined });
    await journal.open();
    const a = itemRecord(QUEUE_JSON, item(1, '{"a":1}'));
    const b = itemRecord(QUEUE_JSON, item(2, '{"b":2}'));
    await Promise.all([journal.append(a), journal.append(b)]);
    await journal.append(updateRecord(QUEUE_JSON, item(1, '{"a":1}')));
    await journal.close();
    const data = readFileSync(path.join(dir, 'journal-0.jsonl'), 'utf8');
    expect(data.startsWith(GROUP_END), data).to.equal(true);
    expect(data.endsWith(GROUP_END), data).to.equal(true);
    // Two appends of one turn share a group: one group end after both.
    expect(data).to.include(a + b + GROUP_END);
  });

  it('a journal whose first write failed still marks the start of its groups: a group a crash cut short after it is dropped whole (decisions §6)', async () => {
    let failNext = true;
    const write: WriteFn = (fd, buffer, offset, length, position, callback) => {
      if (failNext) {
        failNext = false;
        setImmediate(() => callback(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' }), 0));
        return;
      }
      fsWrite(fd, buffer, offset, length, position, callback);
    };
    const journal = new Journal({ dir, warn: () => undefined, write });
    await journal.open();
    const lost = journal.append(itemRecord(QUEUE_JSON, item(9, '{"lost":9}')));
    await lost.then(
      () => expect.fail('the first write was to fail'),
      () => undefined,
    );
    // One group of two posts, then a crash that cut it after its first record.
    await journal.append(itemRecord(QUEUE_JSON, item(1, '{"a":1}')) + itemRecord(QUEUE_JSON, item(2, '{"b":2}')));
    await journal.close();
    const file = path.join(dir, 'journal-0.jsonl');
    const data = readFileSync(file, 'utf8');
    expect(data.startsWith(GROUP_END), data).to.equal(true);
    writeFileSync(file, data.slice(0, data.indexOf('\n', GROUP_END.length) + 1));
    const { items } = await load(dir);
    expect([...items.keys()], 'half of the group came back').to.deep.equal([]);
  });

  it('a switch to a new journal writes nothing to it on its own: a failure there cannot take back the previous journal\'s last group, which is acknowledged (decisions §6)', async () => {
    let slow = false;
    const failures: string[] = [];
    const write: WriteFn = (fd, buffer, offset, length, position, callback) => {
      const text = buffer.toString('utf8', offset, offset + length);
      // Any write of the new journal's that carries no record fails; the old journal's last group is slow.
      if (slow && position === 0 && !text.includes('"p"')) {
        setImmediate(() => callback(Object.assign(new Error('no space left on device'), { code: 'ENOSPC' }), 0));
        return;
      }
      if (slow && text.includes('"p"')) {
        setTimeout(() => fsWrite(fd, buffer, offset, length, position, callback), 200);
        return;
      }
      fsWrite(fd, buffer, offset, length, position, callback);
    };
    const journal = new Journal({ dir, warn: () => undefined, write, onFailure: (err) => failures.push(err.message) });
    await journal.open();
    await journal.append(itemRecord(QUEUE_JSON, item(1, '{"first":1}')));
    slow = true;
    const acknowledged = journal.append(itemRecord(QUEUE_JSON, item(2, '{"a":2}')));
    await new Promise((resolve) => setImmediate(resolve));
    // The snapshot holds what memory holds: both items.
    const snapshot = journal.snapshot(() => [[QUEUE_JSON, item(1, '{"first":1}')], [QUEUE_JSON, item(2, '{"a":2}')]], async () => null).catch(() => undefined);
    await acknowledged;
    await snapshot;
    await journal.close().catch(() => undefined);
    expect(failures, 'a write failed while an acknowledged change was in flight').to.deep.equal([]);
    const { items } = await load(dir);
    expect([...items.keys()]).to.include('0000000000000002');
  });
});
