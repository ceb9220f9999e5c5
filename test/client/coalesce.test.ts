import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { ClientError, SvcqClient } from '../../src/client/index.js';
import { defineQueue, PUBLIC_ACCESS, uniqueName } from '../http/queue-api.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { freshDatabase } from '../store/support/stores.js';

const HOST = 'jobs.example.com';

/** The requests the server logged for one queue, as `METHOD path`; read once it has stopped (the log is then whole). */
function requestsFor(server: TestServer, queue: string): string[] {
  const text = readFileSync(path.join(server.root, '_svcq/logs/access.log'), 'utf8');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as { method: string; path: string })
    .filter((e) => e.path === `/${queue}` || e.path.startsWith(`/${queue}?`) || e.path.startsWith(`/${queue}/batch`))
    .map((e) => `${e.method} ${e.path}`);
}

/** Starts a server, runs `body` against it, stops it, and gives back what its access log says of `queue`. */
async function logged(queue: string, def: Record<string, unknown>, body: (client: SvcqClient, server: TestServer) => Promise<void>, args: string[] = []): Promise<string[]> {
  const server = await startServer({ args });
  try {
    await defineQueue(server, HOST, queue, { access: PUBLIC_ACCESS, ...def });
    await body(new SvcqClient({ url: server.url, host: HOST }), server);
  } finally {
    await server.stop();
  }
  try {
    return requestsFor(server, queue);
  } finally {
    cleanupTemp(server.root);
  }
}

describe('posts that coalesce: client.post() calls made together go out as one batch (decisions §3.8, §8.1)', function () {
  this.timeout(60_000);

  it('posts made together go out as one POST /<queue>/batch, each call resolving with its own item', async () => {
    const queue = uniqueName('co');
    let ids: string[] = [];
    const requests = await logged(queue, {}, async (client) => {
      const answers = await Promise.all(Array.from({ length: 50 }, (_, n) => client.post(queue, { n })));
      ids = answers.map((a) => a.id);
      expect(new Set(ids).size).to.equal(50);
      for (const a of answers) expect(a).to.deep.equal({ ok: true, id: a.id, status: 'pending' });
      // Each id is its own call's item.
      for (const n of [0, 17, 49]) expect((await client.item(queue, ids[n]!)).id).to.equal(ids[n]);
      const claimed = await client.claim(queue, { worker: 'w', max: 100 });
      const byId = new Map(claimed.items.map((c) => [c.id, c.item]));
      ids.forEach((id, n) => expect(byId.get(id)).to.deep.equal({ n }));
    });
    expect(requests).to.deep.equal([`POST /${queue}/batch`]);
  });

  it('posts made while an earlier one is on its way wait for it, then go out together', async () => {
    const queue = uniqueName('co');
    const requests = await logged(queue, {}, async (client) => {
      const first = client.post(queue, { first: true });
      // One turn of the event loop later the first post has gone out alone; these are made while it is on its way.
      await new Promise((resolve) => setImmediate(resolve));
      const later = Array.from({ length: 20 }, (_, n) => client.post(queue, { n }));
      const answers = await Promise.all([first, ...later]);
      expect(new Set(answers.map((a) => a.id)).size).to.equal(21);
    });
    expect(requests).to.deep.equal([`POST /${queue}`, `POST /${queue}/batch`]);
  });

  it('an item the server refuses fails its own call only, as a plain post of it would fail (decisions §3.8 per-item answers)', async () => {
    const queue = uniqueName('co');
    const schema = { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } };
    const requests = await logged(queue, { schema }, async (client) => {
      const settled = await Promise.allSettled([client.post(queue, { n: 1 }), client.post(queue, { n: 'two' }), client.post(queue, { n: 3 })]);
      expect(settled.map((s) => s.status)).to.deep.equal(['fulfilled', 'rejected', 'fulfilled']);
      const err = (settled[1] as PromiseRejectedResult).reason as ClientError;
      expect(err).to.be.instanceOf(ClientError);
      expect(err.code).to.equal('rejected');
      expect(err.status).to.equal(400);
      const alone = await new SvcqClient({ url: client.options.url, host: HOST, coalesce: false }).post(queue, { n: 'two' }).catch((e: unknown) => e as ClientError);
      expect(err.message).to.equal((alone as ClientError).message);
    });
    expect(requests).to.deep.equal([`POST /${queue}/batch`, `POST /${queue}`]);
  });

  it('only posts with the same options share a batch; each item gets its own call\'s options (decisions §8.1)', async () => {
    const queue = uniqueName('co');
    const requests = await logged(queue, {}, async (client) => {
      const plain = [client.post(queue, { p: 0 }), client.post(queue, { p: 0 })];
      const high = [client.post(queue, { p: 5 }, undefined, { priority: 5 }), client.post(queue, { p: 5 }, undefined, { priority: 5 })];
      const grouped = client.post(queue, { g: 'a' }, undefined, { group: 'a' });
      const answers = await Promise.all([...plain, ...high, grouped]);
      const status = await Promise.all(answers.map((a) => client.item(queue, a.id)));
      expect(status.map((s) => [s.priority, s.group])).to.deep.equal([
        [0, null],
        [0, null],
        [5, null],
        [5, null],
        [0, 'a'],
      ]);
    });
    // The log leaves out the query: two batches (no options, priority 5) and the lone grouped post.
    expect([...requests].sort()).to.deep.equal([`POST /${queue}`, `POST /${queue}/batch`, `POST /${queue}/batch`]);
  });

  it('a post with an idempotency key goes on its own: the batch would key its item K:n, not K (decisions §3.5, §3.8)', async () => {
    const queue = uniqueName('co');
    const requests = await logged(queue, {}, async (client) => {
      const [a, b, c] = await Promise.all([client.post(queue, { n: 1 }, 'key-1'), client.post(queue, { n: 1 }, 'key-1'), client.post(queue, { n: 2 })]);
      expect(a!.id).to.equal(b!.id);
      expect(c!.id).to.not.equal(a!.id);
    });
    expect(requests).to.deep.equal([`POST /${queue}`, `POST /${queue}`, `POST /${queue}`]);
  });

  it('coalesce: false sends every post on its own', async () => {
    const queue = uniqueName('co');
    const requests = await logged(queue, {}, async (_client, server) => {
      const client = new SvcqClient({ url: server.url, host: HOST, coalesce: false });
      await Promise.all(Array.from({ length: 5 }, (_, n) => client.post(queue, { n })));
    });
    expect(requests).to.deep.equal(Array.from({ length: 5 }, () => `POST /${queue}`));
  });

  it('a batch that cannot reach the server fails each of its calls, as unreachable and transient', async () => {
    const server = await startServer();
    const queue = uniqueName('co');
    await defineQueue(server, HOST, queue, { access: PUBLIC_ACCESS });
    const client = new SvcqClient({ url: server.url, host: HOST });
    await client.post(queue, { warm: true });
    await server.stop();
    cleanupTemp(server.root);
    const settled = await Promise.allSettled(Array.from({ length: 10 }, (_, n) => client.post(queue, { n })));
    for (const s of settled) {
      expect(s.status).to.equal('rejected');
      const err = (s as PromiseRejectedResult).reason as ClientError;
      expect(err.code).to.equal('unreachable');
      expect(err.transient).to.equal(true);
    }
  });

  it('holds on PostgreSQL too: posts made together are one batch, each call its own item', async function () {
    const base = process.env.SVCQ_TEST_PG_URL;
    if (!base) {
      console.log('      skipped: SVCQ_TEST_PG_URL is not set');
      this.skip();
    }
    const db = await freshDatabase(base!);
    try {
      const queue = uniqueName('co');
      const requests = await logged(
        queue,
        {},
        async (client) => {
          const answers = await Promise.all(Array.from({ length: 30 }, (_, n) => client.post(queue, { n })));
          expect(new Set(answers.map((a) => a.id)).size).to.equal(30);
          const claimed = await client.claim(queue, { worker: 'w', max: 100 });
          const byId = new Map(claimed.items.map((c) => [c.id, c.item]));
          answers.forEach((a, n) => expect(byId.get(a.id)).to.deep.equal({ n }));
        },
        ['--store', db.url],
      );
      expect(requests).to.deep.equal([`POST /${queue}/batch`]);
    } finally {
      await db.drop();
    }
  });
});
