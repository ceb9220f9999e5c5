import { createElement as h } from 'react';
import { render } from 'ink';
import type { SvcqClient } from '../../client/client.js';
import { Top } from './app.js';
import type { Fetched } from './model.js';

/** Switch to the terminal's alternate screen and clear it; and back, with the cursor shown again. */
const ENTER_ALTERNATE_SCREEN = '\x1b[?1049h\x1b[2J\x1b[H';
const LEAVE_ALTERNATE_SCREEN = '\x1b[?25h\x1b[?1049l';

/**
 * Runs the live view full-screen until `q`, Ctrl-C, SIGINT, SIGTERM or SIGHUP, then puts the
 * terminal back as it was: the alternate screen is left (the shell's screen returns untouched),
 * the cursor is shown, stdin leaves raw mode.
 */
export async function runTop(client: SvcqClient, options: { url: string; intervalMs: number; first?: Fetched }): Promise<void> {
  const stdout = process.stdout;
  const keys = Boolean(process.stdin.isTTY);
  let restored = false;
  const restore = (): void => {
    if (restored) return;
    restored = true;
    stdout.write(LEAVE_ALTERNATE_SCREEN);
  };
  // Should anything end the process before the view unmounts, the terminal still comes back.
  process.once('exit', restore);
  stdout.write(ENTER_ALTERNATE_SCREEN);
  const instance = render(h(Top, { client, url: options.url, intervalMs: options.intervalMs, keys, first: options.first }), { exitOnCtrlC: false, patchConsole: false });
  const stop = (): void => instance.unmount();
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of signals) process.on(signal, stop);
  try {
    await instance.waitUntilExit();
  } finally {
    for (const signal of signals) process.off(signal, stop);
    instance.cleanup();
    restore();
    process.off('exit', restore);
  }
}
