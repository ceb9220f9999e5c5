import { expect } from 'chai';
import pg from 'pg';
import { suiteDatabase } from '../store/support/stores.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS } from './queue-api.js';

/**
 * Schedules on several nodes (decisions §8.3, §6.1): three real `svcq serve` processes on one
 * database, no leader, every node ticking `every: 1` schedules for 30 s while one node is killed
 * with kill -9 and started again. Every occurrence is posted once, none twice, read from the
 * `posted` task events the database holds (each names its schedule and occurrence).
 */

const HOST = 'sched-nodes.example.com';
const MASTER = 'master-sched-nodes-0123456789abcdef';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('schedules on three nodes of one PostgreSQL database, through a kill -9 (decisions §8.3, §6.1)', function () {
  this.timeout(90_000);
  const nodes: TestServer[] = [];
  const db = suiteDatabase({
    setUp: async ({ url }) => void nodes.push(...(await Promise.all([0, 1, 2].map(() => startServer({ masterToken: MASTER, args: ['--store', url] }))))),
    tearDown: async () => {
      for (const n of nodes) await n.kill9();
      for (const n of nodes) cleanupTemp(n.root);
    },
  });

  it('every: 1 schedules for 30 s: each occurrence posted exactly once, within about a second of its time, while a node dies and comes back', async () => {
    const started = Date.now();
    await defineQueue(nodes[0]!, HOST, 'beat', { access: PUBLIC_ACCESS, schedules: { a: { every: 1, missed: 'all' }, b: { every: 1, missed: 'all', item: { b: true } } } });
    await sleep(10_000);
    await nodes[1]!.kill9();
    await sleep(5_000);
    nodes[1] = await startServer({ root: nodes[1]!.root, masterToken: MASTER, args: ['--store', db().url] });
    await sleep(Math.max(0, started + 30_000 - Date.now()));
    // Stop the schedules (deleting the queue stops them), then read what was posted.
    const del = await fetch(`${nodes[2]!.url}/api/v2/def?path=${HOST}/svc-queues/beat.json`, { method: 'DELETE', headers: { authorization: `Bearer ${MASTER}` } });
    expect(del.status).to.equal(200);
    await sleep(1500);
    const client = new pg.Client({ connectionString: db().url });
    await client.connect();
    try {
      const { rows } = await client.query<{ schedule: string; occurrence: string; ts: string; n: string }>(
        `SELECT schedule, occurrence, min(ts) AS ts, count(*) AS n FROM svcq_events WHERE queue = 'beat' AND event = 'posted' GROUP BY schedule, occurrence ORDER BY schedule, occurrence`,
      );
      const items = await client.query<{ n: string }>(`SELECT count(*) AS n FROM svcq_items WHERE queue = $1`, [`${HOST}/beat`]);
      for (const name of ['a', 'b']) {
        const mine = rows.filter((r) => r.schedule === name);
        const twice = mine.filter((r) => Number(r.n) > 1);
        expect(twice, `occurrences of ${name} posted more than once`).to.deep.equal([]);
        const at = mine.map((r) => Number(r.occurrence));
        // Every second from the first occurrence to the last, each once: none missed across the kill.
        // (The first comes once the definition has reached a node, a second or two after the PUT on
        // a loaded machine; the check that counts is that none between is missing or doubled.)
        expect(at.length, name).to.be.at.least(20);
        expect(at[at.length - 1]! - at[0]!, `${name}: a gap among ${at.length} occurrences`).to.equal((at.length - 1) * 1000);
        const late = mine.map((r) => Number(r.ts) - Number(r.occurrence)).sort((x, y) => x - y);
        // Posted within about a second of its time (decisions §8.3). A kill -9 may hold one tick's
        // rows for a moment, and a machine loaded by other work delays ticks: the median is held to
        // the second, and no occurrence may wait as long as the time after which it counts as missed.
        expect(late[Math.floor(late.length / 2)], `${name}: lateness ${JSON.stringify(late)}`).to.be.below(1000);
        expect(late[late.length - 1], `${name}: lateness ${JSON.stringify(late)}`).to.be.below(5000);
      }
      expect(Number(items.rows[0]!.n)).to.equal(rows.length);
    } finally {
      await client.end();
    }
  });
});
