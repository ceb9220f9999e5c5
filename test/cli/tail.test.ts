import { expect } from 'chai';
import { keepLines, lastLines } from '../../src/cli/view/tail.js';

/** A file that only grows, read as the tools endpoints serve it: from byte N to the end. */
function file(text: string): { read: (from: number) => Promise<Buffer>; reads: number[]; size: number } {
  const bytes = Buffer.from(text);
  const reads: number[] = [];
  return {
    reads,
    size: bytes.length,
    read: async (from) => {
      reads.push(from);
      return bytes.subarray(from);
    },
  };
}

const numbered = (n: number, width = 0): string => Array.from({ length: n }, (_, i) => `line ${i}${'x'.repeat(width)}\n`).join('');

describe('lastLines: the last N lines of a growing file, read from its end by Range', () => {
  it('returns the last N whole lines and the offset after them, reading only the end of a large file', async () => {
    const f = file(numbered(100_000));
    const { lines, end } = await lastLines(f.read, f.size, 10);
    expect(lines).to.deep.equal(Array.from({ length: 10 }, (_, i) => `line ${99_990 + i}`));
    expect(end).to.equal(f.size);
    expect(f.reads).to.have.length(1);
    expect(f.reads[0]).to.be.greaterThan(f.size - 20_000);
  });

  it('leaves a line still being written for the follower: the end is after the last newline', async () => {
    const f = file(`${numbered(3)}line 3 half`);
    const { lines, end } = await lastLines(f.read, f.size, 10);
    expect(lines).to.deep.equal(['line 0', 'line 1', 'line 2']);
    expect(end).to.equal(Buffer.byteLength(numbered(3)));
  });

  it('never returns a torn first line, even when the window starts inside a line longer than the window', async () => {
    const f = file(numbered(5, 40_000));
    const { lines } = await lastLines(f.read, f.size, 2);
    expect(lines.map((l) => l.slice(0, 6))).to.deep.equal(['line 3', 'line 4']);
    expect(lines.every((l) => l.length === 40_006)).to.equal(true);
  });

  it('reads further back until N lines pass the filter, or the start of the file', async () => {
    const text = `${numbered(20)}${'skip\n'.repeat(50_000)}`;
    const f = file(text);
    const { lines, end } = await lastLines(f.read, f.size, 5, (l) => l !== 'skip');
    expect(lines).to.deep.equal(['line 15', 'line 16', 'line 17', 'line 18', 'line 19']);
    expect(end).to.equal(f.size);
    expect(f.reads.at(-1)).to.equal(0);
  });

  it('--lines 0 prints nothing and starts following at the end; an empty file gives nothing from 0', async () => {
    const f = file(numbered(50));
    expect(await lastLines(f.read, f.size, 0)).to.deep.equal({ lines: [], end: f.size });
    const empty = file('');
    expect(await lastLines(empty.read, 0, 10)).to.deep.equal({ lines: [], end: 0 });
  });

  it('keepLines keeps whole lines that pass', () => {
    expect(keepLines(Buffer.from('a\nb\nc\n'), (l) => l !== 'b').toString()).to.equal('a\nc\n');
    expect(keepLines(Buffer.from('b\n'), (l) => l !== 'b').length).to.equal(0);
  });
});
