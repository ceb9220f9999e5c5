import { Args, Flags } from '@oclif/core';
import { ClientError } from '../client/client.js';
import { isHost, isQueueName } from '../definitions/names.js';
import { UserError } from './base-command.js';

/** A queue as the operators' commands name it. */
export interface QueueTarget {
  host: string;
  name: string;
}

/** The argument of the commands that take HOST/NAME (`svcq queue`, `svcq pause`, `svcq resume`). */
export const queueArg = Args.string({ description: 'HOST/NAME, the queue domain and the queue name, or NAME with --host', required: true, ignoreStdin: true });

/** `--host` of the commands that take HOST/NAME (`svcq queue`, `svcq pause`, `svcq resume`). */
export const queueHostFlag = Flags.string({ description: 'queue domain of a queue given by its name alone (e.g. jobs.example.com)', env: 'SVCQ_HOST', helpGroup: 'CONNECTION' });

/** What these commands' help says of their argument. */
export const QUEUE_ARG_HELP = `The queue is HOST/NAME, or NAME alone with its domain from --host or SVCQ_HOST, as the queue commands take it. A HOST/ written in the argument wins over SVCQ_HOST; one that differs from --host is a mistake.`;

/**
 * The queue an operators' command names: `jobs.example.com/thumbnails`, or `thumbnails` with
 * `host` (--host or SVCQ_HOST). `argv` is the command line as typed: a host typed with --host
 * must agree with one in the argument, while one from SVCQ_HOST gives way to it.
 */
export function queueTarget(raw: string, host: string | undefined, argv: readonly string[]): QueueTarget {
  // Given on the command line, not read from SVCQ_HOST: a HOST/ in the argument must agree with it.
  const typed = argv.some((a) => a === '--host' || a.startsWith('--host='));
  return parseQueueArg(raw, host || undefined, typed);
}

/**
 * `jobs.example.com/thumbnails`, or `thumbnails` with `given` (--host or SVCQ_HOST) → host and
 * name, or a usage error naming what is wrong. A host in the argument wins over SVCQ_HOST, and
 * must be the same as one typed with --host (`typed`).
 */
function parseQueueArg(raw: string, given: string | undefined, typed: boolean): QueueTarget {
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

/** Runs an operators' call on one queue; its 404 "no such queue" becomes a sentence that names the queue and says where the queues are listed. */
export async function onQueue<T>(target: QueueTarget, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof ClientError && err.status === 404 && (err.body as { error?: unknown } | undefined)?.error === 'no such queue') {
      throw new ClientError(`no queue "${target.name}" is defined on host "${target.host}" (svcq queues lists them)`, err.code, { status: 404, body: err.body });
    }
    throw err;
  }
}
