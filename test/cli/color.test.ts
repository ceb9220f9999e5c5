import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { serverForSuite } from '../support/server.js';
import { eventually, today, tools } from '../tools/helpers.js';
import { defineQueue, postItem, queueName } from '../worker/support.js';

const ESC = '\x1b[';

describe('NO_COLOR (no-color.org) turns colour off everywhere in the CLI', () => {
  const server = serverForSuite({ args: ['--stats-interval', '200'] });
  const env = (extra: Record<string, string>): Record<string, string> => ({ SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken, ...extra });

  before(async () => {
    const queue = queueName('colour');
    await defineQueue(server, queue, { access: { post: 'public' } });
    await postItem(server, queue, { n: 1 });
    const name = `memory-${today()}.log`;
    // The sampler runs every 200 ms; a loaded machine can make it late (an event waited on, not a time measured).
    await eventually('two memory samples', async () => ((await tools(server, `stats/file?name=${name}`)).text.split('\n').length > 2 ? true : undefined), 25_000);
  });

  it('FORCE_COLOR=1 alone colours `stats now` (so the NO_COLOR checks below can see a difference)', async () => {
    const run = await runCli(['stats', 'now'], { env: env({ FORCE_COLOR: '1', NO_COLOR: '' }) });
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout).to.include(ESC);
  });

  const commands: Array<[string, () => string[]]> = [
    ['stats now (panel and bars)', () => ['stats', 'now']],
    ['stats show (chart)', () => ['stats', 'show', `memory-${today()}.log`]],
    ['tasks show (events)', () => ['tasks', 'show', `tasks-${today()}.log`]],
    ['logs (table)', () => ['logs']],
    ['a mistyped command (the not-found sentence)', () => ['wokr', 'thumbnails']],
    ['--help', () => ['stats', 'now', '--help']],
  ];
  for (const [what, args] of commands) {
    it(`NO_COLOR=1 wins over FORCE_COLOR=1: ${what} prints no ESC[ sequence and no Node warning`, async () => {
      const run = await runCli(args(), { env: env({ FORCE_COLOR: '1', NO_COLOR: '1' }) });
      expect(run.stdout + run.stderr, run.stderr).to.not.include(ESC);
      expect(run.stderr).to.not.include("The 'NO_COLOR' env is ignored");
      expect(run.stdout.length + run.stderr.length).to.be.greaterThan(0);
    });
  }
});
