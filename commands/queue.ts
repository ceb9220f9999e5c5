import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../src/cli/base-command.js';
import { ClientError } from '../src/client/client.js';
import { isHost, isQueueName } from '../src/definitions/names.js';
import { queueDetailView } from '../src/cli/view/queues.js';
import { queuePath, type QueueDetail } from '../src/operators/answers.js';

export default class Queue extends BaseCommand<typeof Queue> {
  static override summary = 'Show one queue: counts, rates, its oldest pending items and its leases.';
  static override description = `Needs the master token. Shows the 20 oldest pending items and up to 100 leases, soonest end first. --json prints the answer of GET /api/v2/queues/HOST/NAME.
The queue is HOST/NAME, or NAME alone with its domain from --host or SVCQ_HOST, as the queue commands take it. A HOST/ written in the argument wins over SVCQ_HOST; one that differs from --host is a mistake.`;
  static override examples = ['<%= config.bin %> queue jobs.example.com/thumbnails', '<%= config.bin %> queue thumbnails --host jobs.example.com --json', 'SVCQ_HOST=jobs.example.com <%= config.bin %> queue thumbnails'];

  static override args = {
    queue: Args.string({ description: 'HOST/NAME, the queue domain and the queue name, or NAME with --host', required: true, ignoreStdin: true }),
  };

  static override flags = {
    host: Flags.string({ description: 'queue domain of a queue given by its name alone (e.g. jobs.example.com)', env: 'SVCQ_HOST', helpGroup: 'CONNECTION' }),
  };

  async run(): Promise<QueueDetail> {
    const { args } = await this.parse(Queue);
    // Given on the command line, not read from SVCQ_HOST: a HOST/ in the argument must agree with it.
    const hostTyped = this.argv.some((a) => a === '--host' || a.startsWith('--host='));
    const { host, name } = parseQueueArg(args.queue, this.flags.host || undefined, hostTyped);
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

/**
 * `jobs.example.com/thumbnails`, or `thumbnails` with `given` (--host or SVCQ_HOST) → host and
 * name, or a usage error naming what is wrong. A host in the argument wins over SVCQ_HOST, and
 * must be the same as one typed with --host (`typed`).
 */
function parseQueueArg(raw: string, given: string | undefined, typed: boolean): { host: string; name: string } {
  const slash = raw.indexOf('/');
  if (slash === -1 && given === undefined) throw new UserError(`"${raw}" names no host: give HOST/NAME (e.g. jobs.example.com/${raw}), or the queue's domain with --host or SVCQ_HOST`);
  const host = slash === -1 ? given! : raw.slice(0, slash);
  const name = slash === -1 ? raw : raw.slice(slash + 1);
  const from = slash !== -1 ? '' : typed ? ' (--host)' : ' (SVCQ_HOST)';
  if (slash !== -1 && typed && given !== undefined && given !== host) throw new UserError(`"${raw}" names host "${host}", and --host names "${given}": give the host once`);
  if (!isHost(host)) throw new UserError(`"${host}"${from} is not a valid host (a lowercase DNS name or IPv4 address)`);
  if (!isQueueName(name)) throw new UserError(`"${name}" is not a valid queue name`);
  return { host, name };
}
