import { Command, Flags, ux, type Interfaces } from '@oclif/core';
import { ClientError, SvcqClient } from '../client/client.js';
import { exactJson } from './exact-json.js';
import { jsonErrorLine } from './json-error.js';

/** What a queue call that met the wall without a host is told to do, after the host it went to. */
const HOST_HINT = "pass --host or set SVCQ_HOST: the queue's domain, e.g. jobs.example.com, sent as the Host header to pick the queue";

export type BaseFlags<T extends typeof Command> = Interfaces.InferredFlags<(typeof BaseCommand)['baseFlags'] & T['flags']>;

/**
 * What every client command shares: `--url`, `--token` (flags or SVCQ_URL / SVCQ_TOKEN),
 * `--json`, one client, and errors printed as one sentence on stderr with a non-zero exit.
 */
export abstract class BaseCommand<T extends typeof Command> extends Command {
  static override enableJsonFlag = true;

  static override baseFlags = {
    url: Flags.string({ description: 'server URL', env: 'SVCQ_URL', default: 'http://127.0.0.1:8080', helpGroup: 'CONNECTION' }),
    token: Flags.string({ description: 'bearer token: the master token for management and tools, a user token for queues', env: 'SVCQ_TOKEN', helpGroup: 'CONNECTION' }),
  };

  protected flags!: BaseFlags<T>;

  override async init(): Promise<void> {
    await super.init();
    const { flags } = await this.parse({ flags: this.ctor.flags, baseFlags: (this.ctor as typeof BaseCommand).baseFlags, args: this.ctor.args, strict: this.ctor.strict, enableJsonFlag: true });
    this.flags = flags as BaseFlags<T>;
  }

  protected client(extra: { host?: string } = {}): SvcqClient {
    try {
      return new SvcqClient({ url: this.flags.url, token: this.flags.token, host: extra.host, tokenHint: 'pass --token or set SVCQ_TOKEN', hostHint: HOST_HINT });
    } catch (err) {
      // Named by its flag, which is what the user typed.
      if (err instanceof ClientError && err.code === 'invalid-url') throw new ClientError(`--url: ${err.message}`, err.code);
      throw err;
    }
  }

  /** --json output, numbers read with `exactAnswer` printed as the server sent them (oclif's own would round them). */
  override logJson(json: unknown): void {
    ux.stdout(ux.colorizeJson(exactJson(json, 2) ?? 'null', { pretty: false, theme: this.config.theme?.json }));
  }

  /** One sentence on stderr (with --json, `{ "error": sentence }` there), never a stack trace; stdout stays empty (decisions §1.2). */
  protected override async catch(err: Error & { code?: string; exitCode?: number; oclif?: { exit?: number } }): Promise<unknown> {
    // this.exit() from run(): the command has said everything already, also with --json.
    if (err.code === 'EEXIT') throw err;
    if (err instanceof ClientError || err instanceof UserError) {
      if (this.jsonEnabled()) jsonError(err.message);
      else process.stderr.write(`svcq: ${err.message}\n`);
      this.exit(err instanceof UserError ? err.exitCode : 1);
    }
    // Anything else (a flag oclif could not parse, say) is still one sentence with --json.
    if (this.jsonEnabled() && err.oclif?.exit !== 0) {
      const sentence = err.message
        .split('\n')
        .map((line) => line.trim())
        .filter((line) => line !== '' && !line.startsWith('See more help'))
        .join(' ');
      jsonError(sentence);
      this.exit(err.oclif?.exit ?? 1);
    }
    return super.catch(err);
  }
}

/** An error with --json: `{ "error": sentence }` on stderr, where errors go (decisions §1.2). */
export function jsonError(sentence: string): void {
  process.stderr.write(`${jsonErrorLine(sentence)}\n`);
}

/**
 * What kind of {@link UserError} it is: `usage`, a mistake in what was asked (exit 2 unless told);
 * `not-done`, a request understood but not carried out (some items not posted, no archived payload).
 */
export type UserErrorCode = 'usage' | 'not-done';

/** A mistake in what the user asked for, or a request not carried out, with the exit code to leave with. */
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
    readonly code: UserErrorCode = exitCode === 2 ? 'usage' : 'not-done',
  ) {
    super(message);
  }
}

export const hostFlag = Flags.string({ description: 'queue domain sent as the Host header (e.g. jobs.example.com)', env: 'SVCQ_HOST', helpGroup: 'CONNECTION' });
