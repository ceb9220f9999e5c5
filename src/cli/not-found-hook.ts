import type { Hook } from '@oclif/core';
import { createInterface } from 'node:readline/promises';
import { suggestCommand } from './suggest.js';

/**
 * A command that does not exist: one sentence on stderr (`{ "error" }` with --json) with the nearest command, exit 127 (the
 * shell's "command not found"). Only on a terminal, where someone can answer, does it offer to run
 * the suggestion; in a script it never waits for an answer. A command given arguments it does
 * not take is a usage error (exit 2), in one sentence too.
 */
const hook: Hook<'command_not_found'> = async function (opts) {
  const { config } = opts;
  const words = [...opts.id.split(':'), ...(opts.argv ?? [])];
  const ids = config.commands.filter((c) => !c.hidden).map((c) => c.id);
  const json = words.includes('--json');
  const guess = suggestCommand(words, ids);
  // `svcq logs show access.log`: a command that takes no arguments, given one (oclif reads the
  // word as part of the command's name). Said as such, unless the word is near a command under it
  // (`svcq logs shwo`: "logs" takes none either, but "logs show" was meant).
  const parts = opts.id.split(':');
  for (let n = parts.length - 1; n > 0; n--) {
    const command = parts.slice(0, n).join(':');
    if (!ids.includes(command)) continue;
    if (guess.ids.length > 0 && !guess.ids.includes(command)) break;
    const name = command.replaceAll(':', ' ');
    const sentence = `${name} takes no arguments (${parts.slice(n).map((w) => `"${w}"`).join(' ')} given): see "${config.bin} ${name} --help"`;
    process.stderr.write(json ? `${JSON.stringify({ error: sentence })}\n` : `${config.bin}: ${sentence}\n`);
    return this.exit(2);
  }
  const meant = guess.ids.map((id) => `"${id.replaceAll(':', ' ')}"`);
  const sentence = `"${guess.typed}" is not a ${config.bin} command.${meant.length > 0 ? ` Did you mean ${meant.slice(0, -1).join(', ')}${meant.length > 1 ? ' or ' : ''}${meant.at(-1)}?` : ` Run "${config.bin} help" for the list.`}`;
  process.stderr.write(json ? `${JSON.stringify({ error: sentence })}\n` : `${config.bin}: ${sentence}\n`);
  // Offered only when one command is meant: of two, the person says which by typing it.
  const [only] = guess.ids;
  if (only !== undefined && guess.ids.length === 1 && !json && process.stdin.isTTY && process.stderr.isTTY && (await confirm(`Run "${config.bin} ${[only.replaceAll(':', ' '), ...guess.rest].join(' ')}"? [y/N] `))) {
    return config.runCommand(only, guess.rest);
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
