import { Flags } from '@oclif/core';
import { BaseCommand } from '../src/cli/base-command.js';
import { fetchTop } from '../src/cli/top/fetch.js';
import { snapshotTable } from '../src/cli/top/screen.js';
import type { QueueEntry } from '../src/operators/answers.js';
import type { Snapshot } from '../src/tools/stats.js';

export default class Top extends BaseCommand<typeof Top> {
  static override summary = 'Watch every queue live: counts, rates, throughput, leases and the server\'s health.';
  static override description = `Needs the master token. A full-screen view refreshed every second (every N with --interval N): one row per queue (pending, in flight, finished and failed per second, oldest pending age, a sparkline of items done per second over the last minute; "(paused)" after a paused queue's name), the server's CPU, memory and disk, and the selected queue's leases and oldest pending items. Up/down select a queue (PgUp/PgDn ten at a time, Home/End the first and the last); q or Ctrl-C quits.
When stdout is not a terminal (a pipe, a file), or is one that cannot move its cursor (TERM=dumb: an Emacs shell buffer, say), it prints one snapshot as a table and exits; --json prints that snapshot as JSON.`;
  static override examples = ['<%= config.bin %> top --url http://127.0.0.1:8080 --token $SVCQ_TOKEN', '<%= config.bin %> top | cat'];

  static override flags = {
    interval: Flags.integer({ description: 'seconds between refreshes', default: 1, min: 1, max: 2_147_483 }),
  };

  async run(): Promise<{ queues: QueueEntry[]; health: Snapshot | null } | void> {
    const client = this.client();
    // A dumb terminal shows the cursor movements a redraw is made of as text, every second.
    if (process.stdout.isTTY && process.env.TERM !== 'dumb' && !this.jsonEnabled()) {
      // A wrong token or an unreachable server is one sentence on the shell's screen, not a full
      // screen that can only show the error. What it fetched is the view's first screen.
      const first = await fetchTop(client, null, { detail: false });
      // Ink draws nothing but the last frame, at exit, where it believes it runs in CI: it reads
      // CI and CONTINUOUS_INTEGRATION once, when it is loaded. On a terminal the view is asked
      // for, so those two are put aside before it loads; this process starts no other program.
      delete process.env.CI;
      delete process.env.CONTINUOUS_INTEGRATION;
      // The view is loaded only when it is shown: a snapshot needs neither React nor Ink.
      const { runTop } = await import('../src/cli/top/run.js');
      await runTop(client, { url: this.flags.url, intervalMs: this.flags.interval * 1000, first });
      return;
    }
    const { list, health } = await fetchTop(client, null, { detail: false });
    this.log(snapshotTable(list.queues, health));
    return { queues: list.queues, health };
  }
}
