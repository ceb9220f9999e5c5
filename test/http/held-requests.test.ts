import { getEventListeners } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { DefinitionRegistry } from '../../src/definitions/registry.js';
import { parseDefinitionPath, type DefinitionPath } from '../../src/definitions/names.js';
import type { ServerContext } from '../../src/http/context.js';
import { createQueueRouter } from '../../src/http/queue-router.js';
import { ModelStore, newModelDisk } from '../../src/store/model-store.js';
import type { Store } from '../../src/store/store.js';
import { LongPolls } from '../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../src/waiting/notifier.js';
import { request } from '../support/http.js';
import { cleanupTemp, tempDir } from '../support/server.js';
import { PUBLIC_ACCESS, type Json } from './queue-api.js';

const HOST = 'held.example.com';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The queue router in this process, on the reference store, so that a test can make the store's
 * looks slow and see the server's stop signal: what a held claim or fetch leaves behind, and what
 * a hang-up during a look does, cannot be timed or seen reliably from outside a server process.
 */
describe('held claims and fetches in the queue router (decisions §1.1, §3.3, §3.6)', function () {
  this.timeout(20_000);
  let root: string;
  let server: http.Server;
  let url: string;
  let model: ModelStore;
  let registry: DefinitionRegistry;
  const stopping = new AbortController();
  /** How long each claim takes at the store (0: as the reference store takes it). */
  let claimDelayMs = 0;

  before(async () => {
    root = tempDir();
    registry = await DefinitionRegistry.load(root);
    await registry.put(parseDefinitionPath(`${HOST}/svc-queues/q.json`) as DefinitionPath, Buffer.from(JSON.stringify({ access: PUBLIC_ACCESS })));
    const notifier = new InProcessNotifier();
    model = new ModelStore(newModelDisk(), { notifier });
    await model.open();
    const store = new Proxy(model, {
      get(target, key, receiver) {
        const value = Reflect.get(target, key, receiver) as unknown;
        if (key === 'claim' || key === 'claimMany') {
          return async (...args: unknown[]) => {
            if (claimDelayMs > 0) await sleep(claimDelayMs);
            return (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          };
        }
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }) as unknown as Store;
    // Only what the queue router uses.
    const ctx = { registry, store, waits: new LongPolls(store, notifier), maxBody: 1024 * 1024, stopping: stopping.signal } as unknown as ServerContext;
    server = http.createServer(createQueueRouter(ctx));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await model.close();
    registry.close();
    cleanupTemp(root);
  });

  const post = async (item: unknown): Promise<string> => {
    const reply = await request(url, '/q', { method: 'POST', host: HOST, body: JSON.stringify(item) });
    expect(reply.status, reply.text).to.equal(200);
    return (reply.json as Json).id as string;
  };
  const fetch = async (id: string, query = ''): Promise<Json> => (await request(url, `/q/items/${id}${query}`, { host: HOST })).json as Json;

  it('a held claim or fetch, once answered, leaves no listener on the server\'s stop signal: it would keep the connection in memory for the life of the process (decisions §1.1, §3.3, §3.6)', async () => {
    for (let n = 0; n < 5; n++) {
      const claim = request(url, '/q/claim', { method: 'POST', host: HOST, body: '{"wait":5}' });
      await sleep(100);
      const id = await post({ n });
      expect(((await claim).json as Json).id).to.equal(id);
      const fetched = fetch(id, '?wait=5');
      await sleep(100);
      expect((await request(url, `/q/items/${id}/result`, { method: 'POST', host: HOST, body: '{"done":true}' })).status).to.equal(200);
      expect(await fetched).to.include({ status: 'finished' });
    }
    expect(getEventListeners(stopping.signal, 'abort')).to.have.length(0);
  });

  it('a claim whose caller hung up while its first look was at the store does not go on to wait, and takes no item posted later (decisions §3.3)', async () => {
    claimDelayMs = 300;
    try {
      const body = JSON.stringify({ wait: 10 });
      const base = new URL(url);
      await new Promise<void>((resolve) => {
        const req = http.request({ hostname: base.hostname, port: base.port, path: '/q/claim', method: 'POST', agent: false, headers: { host: HOST, 'content-type': 'application/json', 'content-length': String(body.length) } });
        req.on('error', () => resolve());
        req.on('close', () => resolve());
        req.end(body, () => setTimeout(() => req.destroy(), 50));
      });
      // The first look comes back after the hang-up was heard.
      await sleep(400);
    } finally {
      claimDelayMs = 0;
    }
    const id = await post({ late: true });
    // Past the look a claim still waiting would make: it would have taken the item by now.
    await sleep(700);
    expect(await fetch(id)).to.include({ status: 'pending', attempts: 0 });
  });
});
