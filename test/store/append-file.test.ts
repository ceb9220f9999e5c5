import { constants, readFileSync, statSync, write, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { AppendFile, type WriteFn } from '../../src/store/append-file.js';
import { tempDirEachTest } from '../support/server.js';
import { dataOf } from '../support/files.js';

describe('an append file kept zero-filled ahead of its data', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

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

  it('opens the file with O_DSYNC: an append resolves only once its data is on disk, not in the page cache (decisions §6)', async function () {
    if (process.platform !== 'linux') this.skip();
    const file = path.join(dir, 'j.jsonl');
    let fd = -1;
    // The data's descriptor, as the kernel has it: /proc shows its open flags (in octal).
    const spy: WriteFn = (handle, buffer, offset, length, position, callback) => {
      fd = handle;
      write(handle, buffer, offset, length, position, callback);
    };
    const f = await AppendFile.open(file, { write: spy });
    await f.append('["a"]\n');
    const flags = Number.parseInt(/^flags:\s+([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))![1]!, 8);
    expect(flags & constants.O_DSYNC, `flags ${flags.toString(8)}`).to.equal(constants.O_DSYNC);
    await f.close();
  });

  it('never writes zeros over a group end: a group that reaches the zeros being written waits for them, its end counted (decisions §6: nothing acknowledged is lost)', async () => {
    const file = path.join(dir, 'g.jsonl');
    const end = Buffer.from('["g"]\n');
    const f = await AppendFile.open(file, { preallocate: 4096, groupEnd: end });
    const expected: string[] = [];
    for (let n = 0; n < 40; n++) {
      // A group, and while it is written a second that takes the data past the zeros written so far:
      // the stretch of zeros after it starts right where that second group's records end.
      const first = `["a",${n},"${'x'.repeat(2000 + n)}"]\n`;
      const second = `["b",${n},"${'y'.repeat(1500)}"]\n`;
      const a = f.append(first);
      await new Promise((resolve) => setImmediate(resolve));
      await Promise.all([a, f.append(second)]);
      expected.push(first, second);
    }
    await f.close();
    const data = readFileSync(file, 'utf8');
    expect(data.indexOf('\0'), 'a NUL byte in the data').to.equal(-1);
    expect(data.endsWith('["g"]\n'), 'the last group end').to.equal(true);
    expect(data.split('["g"]\n').join('')).to.equal(expected.join(''));
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

  it('writes every append byte for byte in order, through groups larger than its buffer and text of every UTF-8 width (decisions §6: nothing acknowledged is lost or changed)', async () => {
    const file = path.join(dir, 'w.jsonl');
    // A write that starts a moment late: appends made meanwhile must not touch the group being written.
    const slowWrite: WriteFn = (...args) => setTimeout(() => write(...args), 1);
    const f = await AppendFile.open(file, { preallocate: 1 << 20, write: slowWrite });
    const texts: string[] = [];
    for (let n = 0; n < 400; n++) {
      // ASCII, two- and three-byte characters, a surrogate pair (four bytes), and lines of up to 300 KB.
      const filler = n % 50 === 7 ? 'x'.repeat(300_000) : 'é€😀a'.repeat(n % 13);
      texts.push(`["${n}","${filler}"]\n`);
    }
    let expectedBytes = 0;
    const acks: Array<Promise<void>> = [];
    for (const [n, text] of texts.entries()) {
      acks.push(f.append(text));
      expectedBytes += Buffer.byteLength(text);
      expect(f.size, `size counts queued text in bytes (append ${n})`).to.equal(expectedBytes);
      // Some appends wait for the write before theirs: groups of every size, the buffer reused and grown.
      if (n % 17 === 0) await acks[n];
      else if (n % 5 === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.all(acks);
    expect(dataOf(file)).to.equal(texts.join(''));
    await f.close();
    expect(readFileSync(file, 'utf8')).to.equal(texts.join(''));
  });

  it('without the option behaves as a plain append file: no zeros, ever', async () => {
    const file = path.join(dir, 'plain.log');
    const f = await AppendFile.open(file);
    await f.append('one\n');
    expect(statSync(file).size).to.equal(4);
    await f.close();
    expect(readFileSync(file, 'utf8')).to.equal('one\n');
  });

  it('reports each group an append waited for, with the appends in it; text written later alone is not a group commit (decisions §5.1 commit histograms)', async () => {
    const file = path.join(dir, 'g.jsonl');
    const groups: number[] = [];
    const f = await AppendFile.open(file, { onGroup: (_seconds, appends) => groups.push(appends) });
    await Promise.all([f.append('a\n'), f.append('b\n')]);
    f.appendLater('mark\n');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(dataOf(file)).to.equal('a\nb\nmark\n');
    f.appendLater('mark\n');
    await f.append('c\n');
    await f.close();
    expect(groups).to.deep.equal([2, 1]);
  });
});
