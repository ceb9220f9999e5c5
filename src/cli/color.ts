import chalk from 'chalk';

/**
 * NO_COLOR (https://no-color.org): any non-empty value turns colour off, and it wins over
 * FORCE_COLOR. chalk only reads FORCE_COLOR, so its level is set here once, before any command
 * prints; every chalk style reads the level when it paints, so styles made earlier obey too.
 */
export function applyNoColor(env: NodeJS.ProcessEnv = process.env): boolean {
  if (!env.NO_COLOR) return false;
  chalk.level = 0;
  // Left set, FORCE_COLOR would make Node warn that NO_COLOR is ignored, and colour the output of
  // the commands `svcq work` runs.
  delete env.FORCE_COLOR;
  return true;
}

/** Whether output may carry ANSI colour now (after {@link applyNoColor}). */
export function colorEnabled(): boolean {
  return chalk.level > 0;
}
