import { expect } from 'chai';
import pg from 'pg';
import { suiteDatabase } from '../store/support/stores.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { agentRequest, defineQueue, keepAliveAgent, PUBLIC_ACCESS, type Json } from './queue-api.js';

/**
 * Limits on several nodes (decisions §8.5, §6.1): three real `svcq serve` processes on one
 * database, twelve workers claiming as fast as they can from a queue with `maxActive`,
 * `groupMaxActive` and `rateLimit`. The check reads the task events the database holds: replayed
 * in the order they were written, at no moment are more leases held than allowed (in all, or in
 * one group), no window of `perSeconds` holds more claims than `max`, and every item finishes.
 */

const HOST = 'limit-nodes.example.com';
const MASTER = 'master-limit-nodes-0123456789abcdef';
const ITEMS = 90;
const GROUPS = 6;
const LIMITS = { maxActive: 5, groupMaxActive: 1, rateLimit: { max: 15, perSeconds: 1 } };
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('limits on three nodes of one PostgreSQL database (decisions §8.5, §6.1)', function () {
  this.timeout(120_000);
  const nodes: TestServer[] = [];
  const agent = keepAliveAgent(64);
  const db = suiteDatabase({
    setUp: async ({ url }) => void nodes.push(...(await Promise.all([0, 1, 2].map(() => startServer({ masterToken: MASTER, args: ['--store', url] }))))),
    tearDown: async () => {
      agent.destroy();
      for (const n of nodes) await n.kill9();
      for (const n of nodes) cleanupTemp(n.root);
    },
  });

  const call = (node: TestServer, path: string, body?: string): Promise<{ status: number; json: Json }> =>
    agentRequest(agent, node.url, path, { method: body === undefined ? 'GET' : 'POST', host: HOST, body });

  it('maxActive 5, groupMaxActive 1 and rateLimit 15/s never exceeded with twelve workers on three nodes, and every item finished', async () => {
    await defineQueue(nodes[0]!, HOST, 'limited', { access: PUBLIC_ACCESS, leaseSeconds: 30, ...LIMITS });
    // Every node serves the queue before the workers start (decisions §6.1: within 1 s of its PUT).
    for (const n of nodes) {
      const deadline = Date.now() + 5000;
      while ((await call(n, '/limited/items/ffffffffffffffff')).json.error === 'not found' && Date.now() < deadline) await sleep(20);
    }
    const groupOf = new Map<string, string>();
    for (let i = 0; i < ITEMS; i++) {
      const group = `g${i % GROUPS}`;
      const posted = await call(nodes[i % 3]!, `/limited?group=${group}`, JSON.stringify({ i }));
      expect(posted.status, JSON.stringify(posted.json)).to.equal(200);
      groupOf.set(posted.json.id as string, group);
    }

    let finished = 0;
    const worker = async (w: number): Promise<void> => {
      const node = nodes[w % 3]!;
      while (finished < ITEMS) {
        const claim = await call(node, '/limited/claim', JSON.stringify({ worker: `w${w}`, wait: 2 }));
        expect(claim.status, JSON.stringify(claim.json)).to.equal(200);
        if (claim.json.empty) continue;
        // Hold the lease a little, so that the limits have leases to count.
        await sleep(5 + ((w * 7) % 20));
        const done = await call(nodes[(w + 1) % 3]!, `/limited/items/${claim.json.id as string}/result`, JSON.stringify({ w }));
        expect(done.status, JSON.stringify(done.json)).to.equal(200);
        finished++;
      }
    };
    await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));

    const client = new pg.Client({ connectionString: db().url });
    await client.connect();
    try {
      const { rows } = await client.query<{ id: string; event: string; ts: string }>(
        `SELECT id, event, ts FROM svcq_events WHERE queue = 'limited' AND event IN ('claimed', 'finished', 'requeued', 'failed', 'timedout', 'cancelled', 'released') ORDER BY seq`,
      );
      // Replayed in the order written: a claim counted the leases only after the results it saw
      // had committed, so a result's event always comes before the claim that took its place.
      let active = 0;
      let most = 0;
      const perGroup = new Map<string, number>();
      const leased = new Set<string>();
      for (const r of rows) {
        const g = groupOf.get(r.id)!;
        if (r.event === 'claimed') {
          leased.add(r.id);
          active++;
          perGroup.set(g, (perGroup.get(g) ?? 0) + 1);
          most = Math.max(most, active);
          expect(active, `leases held at once, at ${r.ts}`).to.be.at.most(LIMITS.maxActive);
          expect(perGroup.get(g), `leases held at once in ${g}, at ${r.ts}`).to.be.at.most(LIMITS.groupMaxActive);
        } else if (leased.delete(r.id)) {
          active--;
          perGroup.set(g, perGroup.get(g)! - 1);
        }
      }
      // The limits were reached, not merely never approached.
      expect(most).to.equal(LIMITS.maxActive);
      const claims = rows.filter((r) => r.event === 'claimed').map((r) => Number(r.ts)).sort((a, b) => a - b);
      const windowMs = LIMITS.rateLimit.perSeconds * 1000;
      let from = 0;
      for (let to = 0; to < claims.length; to++) {
        while (claims[from]! <= claims[to]! - windowMs) from++;
        expect(to - from + 1, `claims in the window ending at ${claims[to]}`).to.be.at.most(LIMITS.rateLimit.max);
      }
      const status = await client.query<{ status: string; n: string }>(`SELECT status, count(*) AS n FROM svcq_items WHERE queue = $1 GROUP BY status`, [`${HOST}/limited`]);
      expect(status.rows.map((r) => [r.status, Number(r.n)])).to.deep.equal([['finished', ITEMS]]);
      // The rate limit bounds the run from below: ITEMS claims at 15 a second take at least 5 s.
      expect(claims[claims.length - 1]! - claims[0]!).to.be.at.least(Math.floor((ITEMS - 1) / LIMITS.rateLimit.max) * windowMs - windowMs);
    } finally {
      await client.end();
    }
  });

  it('a rate limit alone (20/s) never exceeded by claims of up to five from twelve workers on three nodes, and reached: the leases keep pace with the window', async () => {
    const rate = { max: 20, perSeconds: 1 };
    const items = 100;
    await defineQueue(nodes[0]!, HOST, 'rated', { access: PUBLIC_ACCESS, leaseSeconds: 30, rateLimit: rate });
    for (const n of nodes) {
      const deadline = Date.now() + 5000;
      while ((await call(n, '/rated/items/ffffffffffffffff')).json.error === 'not found' && Date.now() < deadline) await sleep(20);
    }
    const batch = await call(nodes[0]!, '/rated/batch', JSON.stringify(Array.from({ length: items }, (_, i) => ({ i }))));
    expect(batch.status, JSON.stringify(batch.json)).to.equal(200);
    let leased = 0;
    const worker = async (w: number): Promise<void> => {
      const node = nodes[w % 3]!;
      let done: string[] = [];
      while (leased < items) {
        const claim = await call(node, '/rated/claim', JSON.stringify({ worker: `w${w}`, wait: 2, max: 5, done: done.map((id) => ({ id, result: { w } })) }));
        expect(claim.status, JSON.stringify(claim.json)).to.equal(200);
        done = ((claim.json.items ?? []) as Json[]).map((it) => it.id as string);
        leased += done.length;
      }
      if (done.length > 0) await call(node, '/rated/claim', JSON.stringify({ worker: `w${w}`, max: 1, done: done.map((id) => ({ id, result: { w } })) }));
    };
    await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));

    const client = new pg.Client({ connectionString: db().url });
    await client.connect();
    try {
      const { rows } = await client.query<{ ts: string }>(`SELECT ts FROM svcq_events WHERE queue = 'rated' AND event = 'claimed'`);
      const claims = rows.map((r) => Number(r.ts)).sort((a, b) => a - b);
      expect(claims).to.have.length(items);
      const windowMs = rate.perSeconds * 1000;
      let from = 0;
      for (let to = 0; to < claims.length; to++) {
        while (claims[from]! <= claims[to]! - windowMs) from++;
        expect(to - from + 1, `claims in the window ending at ${claims[to]}`).to.be.at.most(rate.max);
      }
      // Reached: 100 claims at 20 a second take four windows after the first, and not far more
      // (each window's leases follow as the slots of the window before free up; a loaded machine
      // may add some).
      const span = claims[claims.length - 1]! - claims[0]!;
      expect(span).to.be.at.least(4 * windowMs);
      expect(span, 'the claims lagged the window').to.be.below(6 * windowMs);
    } finally {
      await client.end();
    }
  });
});
