import { BaseCommand } from '../src/cli/base-command.js';
import { setQueuePaused } from '../src/cli/pause.js';
import { QUEUE_ARG_HELP, queueArg, queueHostFlag, queueTarget } from '../src/cli/queue-arg.js';
import type { PauseAnswer } from '../src/operators/answers.js';

export default class Pause extends BaseCommand<typeof Pause> {
  static override summary = 'Pause a queue: its claims lease nothing until it is resumed.';
  static override description = `Needs the master token. While a queue is paused, every claim of it finds nothing and a held claim (one with a wait) waits on; posts, fetches, results, errors and deadlines go on. The server keeps the pause (a restart, and on PostgreSQL every node, keeps to it) until svcq resume. Pausing a paused queue changes nothing. --json prints the answer of POST /api/v2/queues/HOST/NAME/pause.
${QUEUE_ARG_HELP}`;
  static override examples = ['<%= config.bin %> pause jobs.example.com/thumbnails', '<%= config.bin %> pause thumbnails --host jobs.example.com --json'];

  static override args = {
    queue: queueArg,
  };

  static override flags = {
    host: queueHostFlag,
  };

  async run(): Promise<PauseAnswer> {
    const { args } = await this.parse(Pause);
    const { answer, line } = await setQueuePaused(this.client(), queueTarget(args.queue, this.flags.host, this.argv), true);
    this.log(line);
    return answer;
  }
}
