import type { Hook } from '@oclif/core';
import { createInterface } from 'node:readline/promises';
import { suggestCommand } from './suggest.js';

/**
 * A command that does not exist: one sentence on stderr (`{ "error" }` with --json) with the nearest command, exit 127 (the
 * shell's "command not found"). Only on a terminal, where someone can answer, does it offer to run
 * the suggestion; in a script it never waits for an answer.
 */
const hook: Hook<'command_not_found'> = async function (opts) {
  const { config } = opts;
  const words = [...opts.id.split(':'), ...(opts.argv ?? [])];
  const ids = config.commands.filter((c) => !c.hidden).map((c) => c.id);
  const guess = suggestCommand(words, ids);
  const meant = guess.id?.replaceAll(':', ' ');
  const sentence = `"${guess.typed}" is not a ${config.bin} command.${meant ? ` Did you mean "${meant}"?` : ` Run "${config.bin} help" for the list.`}`;
  const json = words.includes('--json');
  process.stderr.write(json ? `${JSON.stringify({ error: sentence })}\n` : `${config.bin}: ${sentence}\n`);
  if (guess.id && !json && process.stdin.isTTY && process.stderr.isTTY && (await confirm(`Run "${config.bin} ${[meant, ...guess.rest].join(' ')}"? [y/N] `))) {
    return config.runCommand(guess.id, guess.rest);
  }
  this.exit(127);
};

async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await rl.question(question);
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}

export default hook;
