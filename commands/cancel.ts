import { Args } from '@oclif/core';
import { BaseCommand, hostFlag } from '../src/cli/base-command.js';
import type { SubmissionAnswer } from '../src/protocol.js';

export default class Cancel extends BaseCommand<typeof Cancel> {
  static override summary = 'Cancel an item that is not yet terminal.';
  static override description = 'A pending or running item becomes "cancelled"; a worker running it stops its command. An item already terminal is left as it is (and the command says so).';
  static override examples = ['<%= config.bin %> cancel thumbnails 0123456789abcdef --host jobs.example.com --token $ALICE_TOKEN'];

  static override args = {
    queue: Args.string({ description: 'queue name', required: true, ignoreStdin: true }),
    id: Args.string({ description: 'item id (16 hex characters)', required: true, ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
  };

  async run(): Promise<SubmissionAnswer> {
    const { args } = await this.parse(Cancel);
    const result = await this.client({ host: this.flags.host }).cancel(args.queue, args.id);
    this.log(result.accepted ? `${args.id} cancelled` : `${args.id} not cancelled: it is already ${result.status}`);
    return result;
  }
}
