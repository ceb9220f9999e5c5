import { BaseCommand } from '../src/cli/base-command.js';
import { setQueuePaused } from '../src/cli/pause.js';
import { QUEUE_ARG_HELP, queueArg, queueHostFlag, queueTarget } from '../src/cli/queue-arg.js';
import type { PauseAnswer } from '../src/operators/answers.js';

export default class Resume extends BaseCommand<typeof Resume> {
  static override summary = 'Resume a paused queue: its claims lease items again.';
  static override description = `Needs the master token. Claims held on the queue (on every node) look again at once. Resuming a queue that is not paused changes nothing. --json prints the answer of POST /api/v2/queues/HOST/NAME/resume.
${QUEUE_ARG_HELP}`;
  static override examples = ['<%= config.bin %> resume jobs.example.com/thumbnails', '<%= config.bin %> resume thumbnails --host jobs.example.com --json'];

  static override args = {
    queue: queueArg,
  };

  static override flags = {
    host: queueHostFlag,
  };

  async run(): Promise<PauseAnswer> {
    const { args } = await this.parse(Resume);
    const { answer, line } = await setQueuePaused(this.client(), queueTarget(args.queue, this.flags.host, this.argv), false);
    this.log(line);
    return answer;
  }
}
