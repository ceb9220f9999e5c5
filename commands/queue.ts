import { Args } from '@oclif/core';
import { BaseCommand, UserError } from '../src/cli/base-command.js';
import { ClientError } from '../src/client/client.js';
import { isHost, isQueueName } from '../src/definitions/names.js';
import { queueDetailView } from '../src/cli/view/queues.js';
import { queuePath, type QueueDetail } from '../src/operators/answers.js';

export default class Queue extends BaseCommand<typeof Queue> {
  static override summary = 'Show one queue: counts, rates, its oldest pending items and its leases.';
  static override description = 'Needs the master token. Shows the 20 oldest pending items and up to 100 leases, soonest end first. --json prints the answer of GET /api/v2/queues/HOST/NAME.';
  static override examples = ['<%= config.bin %> queue jobs.example.com/thumbnails', '<%= config.bin %> queue jobs.example.com/thumbnails --json'];

  static override args = {
    queue: Args.string({ description: 'HOST/NAME: the queue domain and the queue name', required: true, ignoreStdin: true }),
  };

  async run(): Promise<QueueDetail> {
    const { args } = await this.parse(Queue);
    const { host, name } = parseQueueArg(args.queue);
    let detail: QueueDetail;
    try {
      detail = await this.client().json<QueueDetail>('GET', queuePath(host, name), { shape: 'queueDetail' });
    } catch (err) {
      if (err instanceof ClientError && err.status === 404 && (err.body as { error?: unknown } | undefined)?.error === 'no such queue') {
        throw new ClientError(`no queue "${name}" is defined on host "${host}" (svcq queues lists them)`, 'http', { status: 404, body: err.body });
      }
      throw err;
    }
    this.log(queueDetailView(detail));
    return detail;
  }
}

/** `jobs.example.com/thumbnails` → host and name, or a usage error naming what is wrong. */
function parseQueueArg(raw: string): { host: string; name: string } {
  const slash = raw.indexOf('/');
  if (slash === -1) throw new UserError(`"${raw}" is not HOST/NAME (e.g. jobs.example.com/thumbnails)`);
  const host = raw.slice(0, slash);
  const name = raw.slice(slash + 1);
  if (!isHost(host)) throw new UserError(`"${host}" is not a valid host (a lowercase DNS name or IPv4 address)`);
  if (!isQueueName(name)) throw new UserError(`"${name}" is not a valid queue name`);
  return { host, name };
}
