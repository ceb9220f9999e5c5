import { expect } from 'chai';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { freshDatabase, postgresUnderTest } from '../store/support/stores.js';
import { eventually, putQueue, today, tools } from './helpers.js';

/**
 * Deadlines that pass together while no node runs (a restart, a node down) are applied together
 * at the next start; the task history must still tell each rule's event with the status and
 * attempts that rule left, the same on every store (decisions §5, §3.2, §2.2).
 */

const HOST = 'deadlines.history.test';
const PUBLIC = { post: 'public', fetch: 'public', work: 'public' };
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface TaskEvent {
  event: string;
  attempts?: number;
  worker?: string;
  status?: string;
}

async function eventsOf(server: TestServer, id: string, count: number): Promise<TaskEvent[]> {
  return eventually(`${count} events of ${id}`, async () => {
    const reply = await tools(server, `tasks/file?name=tasks-${today()}.log`);
    const events = reply.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as TaskEvent & { id: string })
      .filter((e) => e.id === id)
      .map(({ event, attempts, worker, status }) => ({ event, attempts, worker, status }));
    return events.length >= count ? events : undefined;
  });
}

for (const store of ['embedded', 'postgres'] as const) {
  describe(`task events of deadlines applied together after a restart (${store} store)`, function () {
    this.timeout(60_000);
    let db: { url: string; drop: () => Promise<void> } | undefined;
    let server: TestServer | undefined;

    before(async function () {
      if (store === 'postgres') {
        const target = await postgresUnderTest();
        if ('whyNot' in target) {
          console.log(`    skipped: ${target.whyNot}`);
          this.skip();
        }
        db = await freshDatabase(target.url);
      }
    });
    after(async () => {
      await server?.stop();
      if (server) cleanupTemp(server.root);
      await db?.drop();
    });

    const start = (root?: string): Promise<TestServer> => startServer({ root, args: db ? ['--store', db.url] : [] });

    it('a lease that ended and then a timeout, both past at the start, are recorded as requeued (pending) then timedout (decisions §5, §3.2, §2.2)', async () => {
      server = await start();
      await putQueue(server, HOST, 'late', { access: PUBLIC, leaseSeconds: 1, timeoutSeconds: 2, maxAttempts: 3 });
      const posted = await request(server.url, '/late', { method: 'POST', host: HOST, body: '{"n":1}' });
      const id = (posted.json as { id: string }).id;
      const claimed = await request(server.url, '/late/claim', { method: 'POST', host: HOST, body: '{"worker":"w-late"}' });
      expect((claimed.json as { id?: string }).id, claimed.text).to.equal(id);
      // Down before the lease ends; back after the timeout has passed too.
      const root = server.root;
      expect(await server.stop()).to.equal(0);
      await sleep(2300);
      server = await start(root);
      expect(await eventsOf(server, id, 4)).to.deep.equal([
        { event: 'posted', attempts: 0, worker: undefined, status: 'pending' },
        { event: 'claimed', attempts: 1, worker: 'w-late', status: 'claimed' },
        { event: 'requeued', attempts: 1, worker: 'w-late', status: 'pending' },
        { event: 'timedout', attempts: 1, worker: undefined, status: 'timedout' },
      ]);
    });
  });
}
