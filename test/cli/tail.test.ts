import { expect } from 'chai';
import type { SvcqClient } from '../../src/client/client.js';
import { keepLines, lastLines, tailAccessLog } from '../../src/cli/view/tail.js';

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

/**
 * An access log as the tools endpoints serve it (interface §4.6): an active file and rotated files
 * named by ts. `rotateOn(n)` rotates just before the n-th request is answered, and the next line
 * is written to the new active file at once, so a request that raced a rotation meets another file.
 */
function accessLog() {
  const rotated: Array<{ ts: number; bytes: Buffer }> = [];
  let active = Buffer.alloc(0);
  let written = 0;
  let requests = 0;
  const rotations = new Set<number>();
  const write = (): void => {
    active = Buffer.concat([active, Buffer.from(`line ${written++}\n`)]);
  };
  const answer = (): void => {
    requests++;
    if (rotations.has(requests)) {
      rotated.push({ ts: rotated.length + 1, bytes: active });
      active = Buffer.alloc(0);
      for (let i = 0; i < 8; i++) write();
    }
  };
  const client = {
    tool: async () => {
      answer();
      return { active: { size: active.length }, rotated: rotated.map((r) => ({ ts: r.ts, size: r.bytes.length })) };
    },
    toolFile: async (_endpoint: string, query: { which: string }, from: number) => {
      answer();
      const bytes = query.which === 'active' ? active : rotated.find((r) => String(r.ts) === query.which)!.bytes;
      return bytes.subarray(from);
    },
  };
  return { client, write, rotateOn: (n: number) => rotations.add(n), written: () => written };
}

describe('tailAccessLog: following the access log across rotations, like tail -F (decisions §5)', () => {
  // Request 1 is the follower's first list: a rotation there comes after the offset it starts from was taken.
  for (const at of [1, 2, 3, 4, 5, 6, 7, 8]) {
    it(`prints every line exactly once when a rotation lands on request ${at}, between a list and a read`, async () => {
      const log = accessLog();
      for (let i = 0; i < 5; i++) log.write();
      log.rotateOn(at);
      const out: Buffer[] = [];
      const stop = new AbortController();
      const printed = (): string[] => Buffer.concat(out).toString().split('\n').filter(Boolean);
      const done = tailAccessLog(log.client as unknown as SvcqClient, { offset: 0, newest: 0 }, { intervalMs: 1, signal: stop.signal, write: (chunk) => void out.push(chunk) });
      // One more line once following, then as long as it takes to print them all (or 2 s) and a few polls more.
      await new Promise((r) => setTimeout(r, 5));
      log.write();
      const deadline = Date.now() + 2000;
      while (printed().length < log.written() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 20));
      stop.abort();
      await done;
      expect(printed()).to.deep.equal(Array.from({ length: log.written() }, (_, i) => `line ${i}`));
    });
  }
});
