import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { makeDir } from '../durable-files.js';
import { accessPolicy, resolveQueue, type AccessPolicy, type QueueConfig } from '../engine/config.js';
import { FileDefinitionStore, type DefinitionStore } from './definition-store.js';
import { sha256Hex, type Manifest } from './manifest.js';
import { parseDefinition, parseIncomingDefinition, type ItemValidator, type ParsedDefinition } from './schemas.js';
import { FOLDER, type DefinitionPath } from './names.js';

/** What the server knows of one queue right now. Replaced whole on every PUT. */
export interface QueueRuntime {
  host: string;
  name: string;
  /** `<host>/<name>`: how the store names the queue. */
  key: string;
  config: QueueConfig;
  access: AccessPolicy;
  validator: ItemValidator | null;
}

interface HostDefinitions {
  queues: Map<string, QueueRuntime>;
  /** user name → {@link DefinitionRegistry.tokenKey} of the user's token, made once when the definition is read */
  users: Map<string, Buffer>;
  /** {@link DefinitionRegistry.tokenKey} of a user's token (hex) → the user (the first defined, should two share a token), kept with every change */
  byToken: Map<string, string>;
}

/** What {@link DefinitionRegistry.userForKey} looks in for a host that has no definitions. */
const NO_DEFINITIONS: HostDefinitions = { queues: new Map(), users: new Map(), byToken: new Map() };

/** A definition the server refuses (`message` names the file, then every problem): answered 400. */
export class DefinitionError extends Error {
  readonly code = 'invalid-definition';
}

/**
 * The live definitions: their exact bytes in a {@link DefinitionStore} (files under `--root`
 * today), and their parsed form in memory so that a request never reads storage. A PUT or DELETE
 * takes effect for the next request (decisions §2.4). The manifest hashes what is stored.
 */
export class DefinitionRegistry {
  private readonly hosts = new Map<string, HostDefinitions>();
  private readonly hashes = new Map<string, string>();
  /** The key of {@link tokenKey}: this process's own, never stored. */
  private readonly lookupSecret = randomBytes(32);
  /** What a token no user holds is compared with (see {@link userForKey}). */
  private readonly unknownKey = randomBytes(32);
  /**
   * Writes and deletes run one at a time, so that the file on disk and the definition in memory
   * always come from the same request, even when two PUTs of one path race.
   */
  private writes: Promise<unknown> = Promise.resolve();

  /** Stops following the store's changes (see {@link load}). */
  private unwatch: (() => void) | undefined;

  /** Told the key (`host/name`) of every queue definition made live or dropped. */
  private readonly queueListeners: Array<(key: string) => void> = [];

  /** Told the host of every definition, queue or user, made live or dropped. */
  private readonly hostListeners: Array<(host: string) => void> = [];

  private constructor(
    private readonly stored: DefinitionStore,
    private readonly warn: (line: string) => void,
    private readonly refuseUrl: (url: string) => string | null,
  ) {}

  /**
   * Loads every stored definition: from the files under `root`, or from the given store. A stored
   * definition that no longer parses is skipped with a warning.
   *
   * A store that others write too (it has `watch`, as the PostgreSQL one) is followed from before
   * the first read: each path another node puts or deletes is re-read with {@link reload}, so the
   * change takes effect here within the store's delay (decisions §6.1: within 1 s). {@link close}
   * stops following.
   */
  static async load(from: string | DefinitionStore, warn: (line: string) => void = () => {}, refuseUrl: (url: string) => string | null = () => null): Promise<DefinitionRegistry> {
    if (typeof from === 'string') await makeDir(from);
    const registry = new DefinitionRegistry(typeof from === 'string' ? new FileDefinitionStore(from) : from, warn, refuseUrl);
    // Watched before the list is read: a change made meanwhile is in the list, or reported, or both.
    registry.unwatch = registry.stored.watch?.((at) => {
      registry.reload(at).catch((err: Error) => warn(`could not reload definition ${at.path} after another node changed it: ${err.message}`));
    });
    for (const { at, bytes } of await registry.stored.list()) registry.apply(at, bytes);
    return registry;
  }

  /** Stops following the store's changes (the store itself is closed by whoever opened it). */
  close(): void {
    this.unwatch?.();
    this.unwatch = undefined;
  }

  /**
   * Re-reads one path from the store and makes what it holds live: its bytes when present (a
   * definition that does not parse is dropped with a warning, as at load), nothing when absent.
   * Runs in turn with this registry's own writes, so memory always ends as the last read left it,
   * and a read never overtakes a local PUT or DELETE. Idempotent.
   */
  reload(at: DefinitionPath): Promise<void> {
    return this.serially(async () => {
      const bytes = this.stored.read ? await this.stored.read(at) : ((await this.stored.list()).find((d) => d.at.path === at.path)?.bytes ?? null);
      if (bytes === null) return this.forget(at);
      this.apply(at, bytes);
    });
  }

  /**
   * Re-reads every stored definition and makes exactly those live (paths no longer stored are
   * dropped). In turn with this registry's own writes.
   */
  refresh(): Promise<void> {
    return this.serially(async () => {
      const stored = await this.stored.list();
      const keep = new Set(stored.map((d) => d.at.path));
      for (const { at, bytes } of stored) this.apply(at, bytes);
      for (const path of [...this.hashes.keys()]) if (!keep.has(path)) this.hashes.delete(path);
      for (const host of [...this.hosts.keys()]) {
        const defs = this.hosts.get(host)!;
        for (const name of [...defs.queues.keys()]) {
          const at: DefinitionPath = { host, kind: 'queue', name, path: `${host}/${FOLDER.queue}/${name}.json` };
          if (!keep.has(at.path)) this.forget(at);
        }
        for (const name of [...defs.users.keys()]) {
          const at: DefinitionPath = { host, kind: 'user', name, path: `${host}/${FOLDER.user}/${name}.json` };
          if (!keep.has(at.path)) this.forget(at);
        }
      }
    });
  }

  /** Calls `listener` with a queue's key (`host/name`) after its definition is put, re-read or dropped, here or by another node. */
  onQueueChange(listener: (key: string) => void): void {
    this.queueListeners.push(listener);
  }

  private queueChanged(host: string, name: string): void {
    const key = `${host}/${name}`;
    for (const listener of this.queueListeners) listener(key);
  }

  /**
   * Calls `listener` with a host after any of its definitions (a queue or a user) is put, re-read
   * or dropped, here or by another node: who may do what on its queues may have changed.
   */
  onHostChange(listener: (host: string) => void): void {
    this.hostListeners.push(listener);
  }

  private hostChanged(host: string): void {
    for (const listener of this.hostListeners) listener(host);
  }

  manifest(): Manifest {
    return Object.fromEntries([...this.hashes.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }

  queue(host: string, name: string): QueueRuntime | undefined {
    return this.hosts.get(host)?.queues.get(name);
  }

  /** Every live queue definition, in no particular order. */
  queues(): QueueRuntime[] {
    return [...this.hosts.values()].flatMap((h) => [...h.queues.values()]);
  }

  hasHost(host: string): boolean {
    return this.hosts.has(host);
  }

  /**
   * What a bearer token is looked up by: its sha256 (what users' definitions hold, decisions §2.3)
   * under an HMAC with a key of this process's own. A request computes it before its queue is
   * looked up, so that a missing queue costs what a present one does.
   */
  tokenKey(token: string): Buffer {
    return this.keyOfDigest(createHash('sha256').update(token).digest());
  }

  private keyOfDigest(digest: Buffer): Buffer {
    return createHmac('sha256', this.lookupSecret).update(digest).digest();
  }

  /** The user of `host` whose token this is, or undefined (see {@link userForKey}). */
  userForToken(host: string, token: string): string | undefined {
    return this.userForKey(host, this.tokenKey(token));
  }

  /**
   * The user of `host` whose token has this {@link tokenKey}, or undefined: one lookup whatever
   * the number of users (a loop over them answered a wrong token on a queue with many users later
   * than on a missing queue, telling the two apart), then a comparison in constant time. What the
   * lookup compares is keyed by a secret, so its time says nothing of any user's token either.
   */
  userForKey(host: string, key: Buffer): string | undefined {
    // The same steps for a host, a token or a user that does not exist: the answer's time says
    // nothing of which of them does.
    const defs = this.hosts.get(host) ?? NO_DEFINITIONS;
    const name = defs.byToken.get(key.toString('hex'));
    const kept = name === undefined ? undefined : defs.users.get(name);
    const same = timingSafeEqual(kept ?? this.unknownKey, key);
    return kept !== undefined && same ? name : undefined;
  }

  /**
   * Validates, then writes the exact bytes atomically, then makes them live. Throws DefinitionError
   * for a bad body, and for a queue whose `push.url` or `callback` the server may not call
   * (decisions §9: `refuseUrl`'s sentence). Definitions already stored are not refused for their
   * URLs: each call out is checked against the allow-list as it stands when it is made.
   */
  async put(at: DefinitionPath, bytes: Buffer): Promise<void> {
    const parsed = parseIncomingDefinition(at, bytes);
    if ('error' in parsed) throw new DefinitionError(parsed.error);
    if (parsed.kind === 'queue') {
      const refusals: string[] = [];
      for (const [field, url] of [['push.url', parsed.queue.push?.url], ['callback', parsed.queue.callback]] as const) {
        const why = url === undefined ? null : this.refuseUrl(url);
        if (why !== null) refusals.push(`${field} ${why}`);
      }
      if (refusals.length > 0) throw new DefinitionError(`${at.path}: ${refusals.join('; ')}`);
    }
    await this.serially(async () => {
      await this.stored.put(at, bytes);
      this.live(at, parsed, bytes);
    });
  }

  /** Removes a stored definition; false when there was none. */
  delete(at: DefinitionPath): Promise<boolean> {
    return this.serially(() => this.remove(at));
  }

  private serially<T>(task: () => Promise<T>): Promise<T> {
    const run = this.writes.then(task, task);
    this.writes = run.catch(() => undefined);
    return run;
  }

  private async remove(at: DefinitionPath): Promise<boolean> {
    const existed = await this.stored.delete(at);
    this.forget(at);
    return existed;
  }

  /** Drops a path from memory only. */
  private forget(at: DefinitionPath): void {
    const host = this.hosts.get(at.host);
    const dropped = at.kind === 'queue' && host?.queues.delete(at.name) === true;
    if (at.kind === 'user' && host) this.dropUser(host, at.name);
    if (host && host.queues.size === 0 && host.users.size === 0) this.hosts.delete(at.host);
    this.hashes.delete(at.path);
    if (dropped) this.queueChanged(at.host, at.name);
    if (host) this.hostChanged(at.host);
  }

  /**
   * Makes stored bytes live in memory. Bytes that do not parse (a file edited by hand, say) are
   * skipped with a warning: whatever the path held before is dropped, and nothing of it is live;
   * but they are still stored, so the manifest lists their hash (interface: every stored
   * definition), and `svcq sync` replaces or deletes them like any other.
   */
  private apply(at: DefinitionPath, bytes: Buffer): void {
    const parsed = parseDefinition(at, bytes);
    if (!('error' in parsed)) return this.live(at, parsed, bytes);
    this.forget(at);
    this.hashes.set(at.path, sha256Hex(bytes));
    this.warn(`skipping stored definition ${parsed.error}`);
  }

  /** Forgets a user and its token; another user with the same token (if any) answers to it now. */
  private dropUser(host: HostDefinitions, name: string): void {
    const kept = host.users.get(name);
    if (!kept) return;
    host.users.delete(name);
    const hex = kept.toString('hex');
    if (host.byToken.get(hex) !== name) return;
    host.byToken.delete(hex);
    for (const [other, otherKey] of host.users) {
      if (otherKey.equals(kept)) {
        host.byToken.set(hex, other);
        return;
      }
    }
  }

  private live(at: DefinitionPath, parsed: ParsedDefinition, bytes: Buffer): void {
    let host = this.hosts.get(at.host);
    if (!host) this.hosts.set(at.host, (host = { queues: new Map(), users: new Map(), byToken: new Map() }));
    if (parsed.kind === 'user') {
      this.dropUser(host, at.name);
      const key = this.keyOfDigest(Buffer.from(parsed.user.tokenSha256, 'hex'));
      host.users.set(at.name, key);
      const hex = key.toString('hex');
      if (!host.byToken.has(hex)) host.byToken.set(hex, at.name);
    } else {
      host.queues.set(at.name, {
        host: at.host,
        name: at.name,
        key: `${at.host}/${at.name}`,
        config: resolveQueue(parsed.queue),
        access: accessPolicy(parsed.queue.access),
        validator: parsed.validator,
      });
    }
    this.hashes.set(at.path, sha256Hex(bytes));
    if (parsed.kind === 'queue') this.queueChanged(at.host, at.name);
    this.hostChanged(at.host);
  }
}
