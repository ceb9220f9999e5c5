/**
 * Names and definition paths (decisions §2.1). Every path a client sends is checked here, as a
 * plain string, before anything touches the file system.
 */

const LABEL = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
const NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export type DefinitionKind = 'queue' | 'user';

export interface DefinitionPath {
  host: string;
  kind: DefinitionKind;
  name: string;
  /** The canonical server-relative path, `<host>/svc-queues/<name>.json` or `<host>/svc-users/<name>.json`. */
  path: string;
}

export const FOLDER: Record<DefinitionKind, string> = { queue: 'svc-queues', user: 'svc-users' };

/** A lowercase DNS name or IPv4 literal of 1–253 characters. `_svcq` can never be one. */
export function isHost(host: string): boolean {
  if (host.length < 1 || host.length > 253) return false;
  return host.split('.').every((label) => label.length <= 63 && LABEL.test(label));
}

/** Queue and user names: `^[a-z0-9][a-z0-9_-]{0,63}$`. */
export function isName(name: string): boolean {
  return NAME.test(name);
}

/** A queue name a client may use: a valid name that is not the reserved `api`. */
export function isQueueName(name: string): boolean {
  return isName(name) && name !== 'api';
}

/**
 * Parses a `path=` value. Returns the parts, or a sentence saying what is wrong with it.
 * The value is taken exactly as decoded once by the query parser: a `%2e%2e` that arrives as
 * `..` or a `%2f` that arrives as `/` is judged as what it became, and anything but the two
 * exact shapes is refused.
 */
export function parseDefinitionPath(raw: unknown): DefinitionPath | { error: string } {
  if (Array.isArray(raw)) return { error: 'path is given more than once: send exactly one path=<host>/svc-queues/<name>.json or <host>/svc-users/<name>.json' };
  if (typeof raw !== 'string' || raw === '') {
    return { error: 'path is required: expected <host>/svc-queues/<name>.json or <host>/svc-users/<name>.json' };
  }
  const shape = `path "${printable(raw)}" is not <host>/svc-queues/<name>.json or <host>/svc-users/<name>.json`;
  const parts = raw.split('/');
  if (parts.length !== 3) return { error: shape };
  const [host, folder, file] = parts as [string, string, string];
  const kind: DefinitionKind | undefined = folder === 'svc-queues' ? 'queue' : folder === 'svc-users' ? 'user' : undefined;
  if (!kind || !file.endsWith('.json')) return { error: shape };
  if (!isHost(host)) return { error: `path "${printable(raw)}": "${printable(host)}" is not a valid host (lowercase DNS name or IPv4 address)` };
  const name = file.slice(0, -'.json'.length);
  if (!isName(name)) {
    return { error: `path "${printable(raw)}": "${printable(name)}" is not a valid name (lowercase letters, digits, "_" and "-", starting with a letter or digit, at most 64 characters)` };
  }
  if (kind === 'queue' && name === 'api') return { error: `path "${printable(raw)}": the queue name "api" is reserved` };
  if (kind === 'user' && name === 'public') return { error: `path "${printable(raw)}": the user name "public" is reserved` };
  return { host, kind, name, path: `${host}/${FOLDER[kind]}/${name}.json` };
}

/** Keeps control characters out of error sentences. */
function printable(s: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is being removed
  const clean = s.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > 120 ? `${clean.slice(0, 117)}...` : clean;
}
