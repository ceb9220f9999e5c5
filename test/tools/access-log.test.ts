import { execFileSync } from 'node:child_process';
import { expect } from 'chai';
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { AccessLog } from '../../src/tools/access-log.js';
import { cleanupTemp, tempDir, tempDirEachTest } from '../support/server.js';
import { eventually } from './helpers.js';

function entry(i: number) {
  return { ts: Date.now(), method: 'GET', host: 'jobs.unit.test', path: `/line-${i}`, status: 200, ms: 0.1, bytes: 10, ip: '127.0.0.1' };
}

/** The paths of the lines in the rotated files, oldest file first. */
function rotatedLines(dir: string): string[] {
  const names = readdirSync(dir)
    .filter((n) => n !== 'access.log')
    .sort((a, b) => Number(/\d+/.exec(a)![0]) - Number(/\d+/.exec(b)![0]));
  return names.flatMap((n) => {
    let text = '';
    try {
      text = readFileSync(path.join(dir, n), 'utf8');
    } catch {
      // pruned since the listing
    }
    return [...text.matchAll(/"path":"([^"]+)"/g)].map((m) => m[1]!);
  });
}

describe('AccessLog rotation (decisions §5)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

  it('rotates back to back without losing or repeating a line, each rotated ts unique, equal to its mtime, in line order', async () => {
    const warnings: string[] = [];
    const log = await AccessLog.open({ dir, maxBytes: 200, keep: 1000, warn: (w) => warnings.push(w) });
    // Lines recorded while a rotation runs are held for the next file; several rotations land within a millisecond or two.
    for (let i = 0; i < 60; i++) {
      log.record(entry(i));
      if (i % 3 === 0) await nextTurn();
      const group = Math.floor(i / 6) + 1;
      if (i % 6 === 5) await eventually(`${group} rotations`, () => (readdirSync(dir).length > group ? true : undefined));
    }
    await log.close();
    expect(warnings).to.deep.equal([]);

    const rotated = readdirSync(dir)
      .filter((n) => n !== 'access.log')
      .map((n) => Number(/^access-(\d+)\.log$/.exec(n)![1]))
      .sort((a, b) => a - b);
    expect(rotated.length).to.be.at.least(10);
    expect(new Set(rotated).size).to.equal(rotated.length);
    const order: number[] = [];
    for (const ts of rotated) {
      const file = path.join(dir, `access-${ts}.log`);
      expect(Math.round(statSync(file).mtimeMs), file).to.equal(ts);
      for (const line of readFileSync(file, 'utf8').split('\n').filter(Boolean)) order.push(Number(/line-(\d+)/.exec(line)![1]));
    }
    for (const line of readFileSync(path.join(dir, 'access.log'), 'utf8').split('\n').filter(Boolean)) order.push(Number(/line-(\d+)/.exec(line)![1]));
    expect(order).to.deep.equal(Array.from({ length: 60 }, (_, i) => i));
  });

  it('keeps only the newest --log-keep rotated files', async () => {
    const log = await AccessLog.open({ dir, maxBytes: 100, keep: 2, warn: (w) => expect.fail(w) });
    // Every line passes maxBytes alone: each is rotated into its own file, and all but two are dropped.
    for (let i = 0; i < 5; i++) {
      log.record(entry(i));
      await eventually(`line ${i} rotated`, () => (rotatedLines(dir).includes(`/line-${i}`) ? true : undefined));
    }
    await log.close();
    expect(rotatedLines(dir)).to.deep.equal(['/line-3', '/line-4']);
  });

  it('rotates at open an active file a previous run left past maxBytes', async () => {
    writeFileSync(path.join(dir, 'access.log'), `${JSON.stringify(entry(7))}\n`.repeat(3));
    const log = await AccessLog.open({ dir, maxBytes: 100, keep: 2, warn: (w) => expect.fail(w) });
    log.record(entry(8));
    await log.close();
    expect(rotatedLines(dir)).to.deep.equal(['/line-7', '/line-7', '/line-7']);
    expect(readFileSync(path.join(dir, 'access.log'), 'utf8')).to.include('/line-8');
  });
});

describe('AccessLog on a disk that fills (decisions §5, §6)', function () {
  this.timeout(30_000);
  let dir: string;
  let mounted = false;
  before(function () {
    dir = tempDir('svcq-log-full-');
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { stdio: 'pipe' });
      mounted = true;
    } catch (err) {
      console.log(`      skipped: cannot mount a 64 KiB tmpfs here (${((err as { stderr?: Buffer }).stderr?.toString() || (err as Error).message).split('\n')[0]})`);
      this.skip();
    }
  });
  after(() => {
    // Lazily: a test that failed may have left its log's file open there.
    if (mounted) execFileSync('umount', ['-l', dir]);
    cleanupTemp(dir);
  });

  it('cuts off the half line a failed write left before it writes again: every line in the file is whole', async () => {
    const warnings: string[] = [];
    /** The file's last byte as the first write refused for want of space left it: read in the warning's own turn, before the next flush (100 ms on) cuts the half line off. */
    let lastByteAtFull: number | undefined;
    const log = await AccessLog.open({
      dir,
      maxBytes: 1 << 30,
      keep: 5,
      warn: (w) => {
        warnings.push(w);
        if (/ENOSPC/.test(w) && lastByteAtFull === undefined) lastByteAtFull = readFileSync(path.join(dir, 'access.log')).at(-1);
      },
    });
    // More than the disk holds, in writes of 64 KiB: the one that fills it stops partway through a line.
    for (let i = 0; i < 1500; i++) log.record(entry(i));
    await eventually('a write refused for want of space', () => (warnings.some((w) => /ENOSPC/.test(w)) ? true : undefined));
    expect(lastByteAtFull, 'the failed write did not stop mid-line: this test would show nothing').to.not.equal(0x0a);
    execFileSync('mount', ['-o', 'remount,size=1m', dir]);
    for (let i = 2000; i < 2010; i++) log.record(entry(i));
    await log.close();
    const lines = readFileSync(path.join(dir, 'access.log'), 'utf8').split('\n');
    expect(lines.pop()).to.equal('');
    for (const line of lines) expect(() => JSON.parse(line), line.slice(0, 200)).to.not.throw();
    expect(lines.slice(-10).map((l) => (JSON.parse(l) as { path: string }).path)).to.deep.equal(Array.from({ length: 10 }, (_, k) => `/line-${2000 + k}`));
  });
});
