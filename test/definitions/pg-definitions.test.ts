import { createHash } from 'node:crypto';
import { expect } from 'chai';
import pg from 'pg';
import { parseDefinitionPath, type DefinitionPath } from '../../src/definitions/names.js';
import { DefinitionRegistry } from '../../src/definitions/registry.js';
import { openPostgresDefinitions, PgDefinitionStore } from '../../src/store/postgres/pg-definition-store.js';
import { silentProxy } from '../store/support/silent-proxy.js';
import { freshDatabase, postgresPresent, postgresUnderTest } from '../store/support/stores.js';

/**
 * Definitions kept in the shared database, two registries on two stores as two `svcq serve`
 * nodes (decisions §6.1: a PUT or DELETE takes effect on every other node within 1 s; the
 * manifest hashes the stored bytes, so it is the same from every node).
 */

const target = await postgresUnderTest();
const HOST = 'defs.example.com';
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function at(p: string): DefinitionPath {
  const parsed = parseDefinitionPath(p);
  if ('error' in parsed) throw new Error(parsed.error);
  return parsed;
}

/** Resolves once `check` holds, polling every 5 ms; the time it took, or a failure after `within` ms. */
async function eventually(within: number, check: () => boolean): Promise<number> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > within) throw new Error(`not within ${within} ms`);
    await sleep(5);
  }
  return Date.now() - started;
}

describe('definitions in PostgreSQL, shared by several nodes (decisions §6.1)', function () {
  this.timeout(60_000);
  let db: { url: string; drop: () => Promise<void> };
  let closers: Array<() => Promise<void>> = [];
  let warnings: string[];

  if (postgresPresent(target)) {
    beforeEach(async () => {
      db = await freshDatabase(target.url);
      closers = [];
      warnings = [];
    });
    afterEach(async () => {
      for (const close of closers.reverse()) await close().catch(() => undefined);
      await db.drop();
    });
  }

  /** One node: its definitions store and the registry loaded from it. */
  async function node(options: { pollMs?: number } = {}): Promise<{ store: PgDefinitionStore; registry: DefinitionRegistry }> {
    const store = await PgDefinitionStore.open({ url: db.url, warn: (l) => warnings.push(l), ...options });
    closers.push(() => store.close());
    const registry = await DefinitionRegistry.load(store, (l) => warnings.push(l));
    closers.push(async () => registry.close());
    return { store, registry };
  }

  it('a PUT on one node is live on the other within 1 s, and a DELETE likewise (decisions §6.1)', async () => {
    const [a, b] = [await node(), await node()];
    const queue = Buffer.from('{"leaseSeconds": 7}\n');
    await a.registry.put(at(`${HOST}/svc-queues/jobs.json`), queue);
    expect(a.registry.queue(HOST, 'jobs')?.config.leaseMs, 'the node that took it, for the next request').to.equal(7000);
    const putMs = await eventually(1000, () => b.registry.queue(HOST, 'jobs')?.config.leaseMs === 7000);

    // Redefined on the other node: the first sees the new rules.
    await b.registry.put(at(`${HOST}/svc-queues/jobs.json`), Buffer.from('{"leaseSeconds": 9}'));
    await eventually(1000, () => a.registry.queue(HOST, 'jobs')?.config.leaseMs === 9000);

    const user = Buffer.from(`{"svc-user-name":"ann","tokenSha256":"${sha(Buffer.from('secret'))}"}`);
    await b.registry.put(at(`${HOST}/svc-users/ann.json`), user);
    await eventually(1000, () => a.registry.userForToken(HOST, 'secret') === 'ann');

    expect(await a.registry.delete(at(`${HOST}/svc-queues/jobs.json`))).to.equal(true);
    expect(a.registry.queue(HOST, 'jobs')).to.equal(undefined);
    const deleteMs = await eventually(1000, () => b.registry.queue(HOST, 'jobs') === undefined);
    expect(await b.registry.delete(at(`${HOST}/svc-queues/jobs.json`)), 'deleted already, by the other node').to.equal(false);
    await eventually(1000, () => JSON.stringify(a.registry.manifest()) === JSON.stringify(b.registry.manifest()));
    expect(a.registry.manifest()).to.deep.equal({ [`${HOST}/svc-users/ann.json`]: sha(user) });
    expect(putMs + deleteMs).to.be.below(2000);
  });

  it('without notifications (a listening connection lost), the poll of the revision still brings changes within 1 s (decisions §6.1)', async () => {
    const [a, b] = [await node(), await node({ pollMs: 300 })];
    // Every LISTEN connection killed: notifications sent before they listen again are lost.
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    closers.push(() => admin.end());
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN%'`);
    await a.registry.put(at(`${HOST}/svc-queues/polled.json`), Buffer.from('{"leaseSeconds": 3}'));
    await eventually(1000, () => b.registry.queue(HOST, 'polled')?.config.leaseMs === 3000);
  });

  it('the manifest is the same from every node, and hashes the exact stored bytes: whitespace and unicode round-trip (decisions §2, §6.1)', async () => {
    const [a, b] = [await node(), await node()];
    const bodies: Record<string, Buffer> = {
      [`${HOST}/svc-queues/spaced.json`]: Buffer.from('  {\r\n\t"leaseSeconds" :  5 ,\n  "description": "naïve café ☕ 𝄞 \\u00e9"\n}\n\n'),
      [`${HOST}/svc-queues/plain.json`]: Buffer.from('{}'),
      [`${HOST}/svc-users/zoe.json`]: Buffer.from(`{ "svc-user-name": "zoe", "tokenSha256": "${sha(Buffer.from('z'))}" }   `),
    };
    for (const [p, bytes] of Object.entries(bodies)) await a.registry.put(at(p), bytes);
    await eventually(1000, () => Object.keys(b.registry.manifest()).length === 3);
    const expected = Object.fromEntries(Object.entries(bodies).map(([p, bytes]) => [p, sha(bytes)]));
    expect(a.registry.manifest()).to.deep.equal(expected);
    expect(b.registry.manifest()).to.deep.equal(expected);
    // A third node started afterwards loads the same.
    const c = await node();
    expect(c.registry.manifest()).to.deep.equal(expected);
    for (const [p, bytes] of Object.entries(bodies)) {
      const stored = await b.store.read(at(p));
      expect(stored?.equals(bytes), p).to.equal(true);
    }
    const listed = await c.store.list();
    expect(listed.map((d) => d.at.path)).to.deep.equal(Object.keys(bodies).sort());
    for (const d of listed) expect(d.bytes.equals(bodies[d.at.path]!)).to.equal(true);
  });

  it('PUTs of one path racing from two nodes leave both nodes with the same, last committed bytes (decisions §6.1)', async () => {
    const [a, b] = [await node(), await node()];
    const p = at(`${HOST}/svc-queues/raced.json`);
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).registry.put(p, Buffer.from(`{"leaseSeconds": ${i + 1}}`))),
    );
    const stored = (await a.store.read(p))!;
    await eventually(1000, () => a.registry.manifest()[p.path] === sha(stored) && b.registry.manifest()[p.path] === sha(stored));
  });

  it('openPostgresDefinitions gives a store a registry follows, and close() stops it', async () => {
    const opened = await openPostgresDefinitions(db.url, (l) => warnings.push(l));
    closers.push(opened.close);
    const registry = await DefinitionRegistry.load(opened.store);
    const other = await node();
    await other.registry.put(at(`${HOST}/svc-queues/seen.json`), Buffer.from('{}'));
    await eventually(1000, () => registry.queue(HOST, 'seen') !== undefined);
    registry.close();
    await opened.close();
    expect(warnings).to.deep.equal([]);
  });

  it('a network that stops answering: reads, PUTs and DELETEs of definitions fail after answerTimeoutMs, nothing is half-written, and they work again once it answers (decisions §6.1)', async () => {
    const proxy = await silentProxy(db.url);
    closers.push(async () => proxy.close());
    const store = await PgDefinitionStore.open({ url: proxy.url, warn: (l) => warnings.push(l), answerTimeoutMs: 1000 });
    closers.push(() => store.close());
    const kept = at(`${HOST}/svc-queues/kept.json`);
    await store.put(kept, Buffer.from('{"leaseSeconds": 3}'));
    proxy.silent.on = true;
    const t0 = Date.now();
    const failures = await Promise.all([
      store.list().then(() => null, (err: Error) => err),
      store.read(kept).then(() => null, (err: Error) => err),
      store.put(at(`${HOST}/svc-queues/lost.json`), Buffer.from('{}')).then(() => null, (err: Error) => err),
      store.delete(kept).then(() => null, (err: Error) => err),
    ]);
    for (const [i, what] of ['list', 'read', 'put', 'delete'].entries()) {
      expect(failures[i], what).to.be.instanceOf(Error);
      // A statement on a connection the pool held, or a new connection that never finished its handshake.
      const message = `${failures[i]!.message} ${(failures[i] as Error & { cause?: Error }).cause?.message ?? ''}`;
      expect(message, what).to.match(/did not answer within 1 s|timeout exceeded when trying to connect/);
    }
    expect(Date.now() - t0, 'refused within about answerTimeoutMs, not held until TCP gives up').to.be.below(4000);
    proxy.silent.on = false;
    expect((await store.read(kept))?.toString(), 'the DELETE cut off was not applied').to.equal('{"leaseSeconds": 3}');
    expect(await store.read(at(`${HOST}/svc-queues/lost.json`)), 'the PUT cut off was not applied').to.equal(null);
    await store.put(at(`${HOST}/svc-queues/after.json`), Buffer.from('{}'));
    expect((await store.list()).map((d) => d.at.path)).to.deep.equal([`${HOST}/svc-queues/after.json`, kept.path]);
  });
});
