import { Flags } from '@oclif/core';
import { BaseCommand, UserError } from '../src/cli/base-command.js';
import { parseExact } from '../src/cli/exact-json.js';
import { PAYLOAD_KINDS } from '../src/tools/files.js';

export default class Payload extends BaseCommand<typeof Payload> {
  static override summary = "Print an item's archived payload body: its item, latest progress, result or latest error, as stored.";
  static override description = 'Payloads are archived only for queues with "svc-queue-archivePayloads": true. The bytes go to stdout unchanged; with --json the body is parsed.';
  static override examples = ['<%= config.bin %> payload --host jobs.example.com --queue resize --id 0123456789abcdef --kind result'];

  static override flags = {
    // Sent as a parameter of the tools endpoint, not as the Host header; read from the same env as the queue commands' --host.
    host: Flags.string({ description: 'queue host (domain) the item belongs to', env: 'SVCQ_HOST', required: true }),
    queue: Flags.string({ description: 'queue name', required: true }),
    id: Flags.string({ description: 'item id (16 hex characters)', required: true }),
    kind: Flags.string({ description: 'which body', options: [...PAYLOAD_KINDS], required: true }),
  };

  async run(): Promise<unknown> {
    const { host, queue, id, kind } = this.flags;
    const bytes = await this.client().toolFile('tasks/payload', { host, queue, id, kind });
    // Archived bodies are JSON objects, never empty: nothing back means nothing archived.
    if (bytes.length === 0) throw new UserError(`no archived ${kind} for item ${id} on ${host}/${queue} (is "svc-queue-archivePayloads" on for that queue?)`, 1);
    if (this.jsonEnabled()) {
      try {
        // Numbers as stored, not rounded by JSON.parse.
        return parseExact(bytes.toString('utf8'));
      } catch {
        return bytes.toString('utf8');
      }
    }
    process.stdout.write(bytes);
  }
}
