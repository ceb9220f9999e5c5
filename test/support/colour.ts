import chalk from 'chalk';

/** In the calling describe, chalk writes no colour (its level restored after): output compared as plain text. */
export function withoutColour(): void {
  let level: typeof chalk.level;
  before(() => {
    level = chalk.level;
    chalk.level = 0;
  });
  after(() => {
    chalk.level = level;
  });
}
