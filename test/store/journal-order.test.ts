import { write } from 'node:fs';
import { expect } from 'chai';
import type { WriteFn } from '../../src/store/append-file.js';
import { Journal } from '../../src/store/journal.js';
import { tempDirEachTest } from '../support/server.js';

describe('journal appends across a switch to a new journal (decisions §5, §6)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made));

  it('resolve in the order they were made, appends held during the switch before any made after it: the task history takes events in that order, each once', async () => {
    // Every write takes 30 ms, so that the previous journal's last group is still being written while the switch waits for it.
    const slow: WriteFn = (fd, buffer, offset, length, position, callback) => write(fd, buffer, offset, length, position, (err, n) => setTimeout(() => callback(err, n), 30));
    const journal = new Journal({ dir, warn: () => undefined, write: slow });
    await journal.open();
    const resolved: string[] = [];
    const append = (name: string): Promise<void> => journal.append(`["m",${resolved.length}]\n`).then(() => void resolved.push(name));
    const done: Array<Promise<void>> = [append('before')];
    const held = (): boolean => (journal as unknown as { held?: unknown }).held !== undefined;
    const snapshot = journal.snapshot(
      () => [],
      async () => {
        // Called right after the held appends went to the new journal: this one joins their group.
        done.push(append('after'));
        return null;
      },
    );
    while (!held()) await new Promise((resolve) => setImmediate(resolve));
    done.push(append('held'));
    await snapshot;
    await Promise.all(done);
    await journal.close();
    expect(resolved).to.deep.equal(['before', 'held', 'after']);
  });
});
