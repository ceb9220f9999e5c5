import http from 'node:http';
import { expect } from 'chai';
import pg from 'pg';
import { suiteDatabase } from '../store/support/stores.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { agentRequest, defineQueue, keepAliveAgent, PUBLIC_ACCESS, type Json } from './queue-api.js';

/**
 * Several `svcq serve` nodes on one PostgreSQL database (decisions §6.1), as black boxes: real
 * server processes, real HTTP, a node killed with kill -9 in the middle of the work.
 */

const HOST = 'nodes.example.com';
const MASTER = 'master-multi-node-0123456789abcdef';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('several nodes on one PostgreSQL database (decisions §6.1)', function () {
  this.timeout(120_000);
  const nodes: TestServer[] = [];
  const agent = keepAliveAgent(64);

  // One database and three nodes for the whole suite: each test uses queues of its own, and what
  // one test does to the nodes (a kill -9 and restart, connections cut) the next ones run after.
  const db = suiteDatabase({
    setUp: async ({ url }) => {
      for (let i = 0; i < 3; i++) nodes.push(await startServer({ masterToken: MASTER, args: ['--store', url] }));
    },
    tearDown: async () => {
      agent.destroy();
      for (const n of nodes) await n.kill9();
      for (const n of nodes) cleanupTemp(n.root);
    },
  });

  /** Defines the queue through one node, and waits until every node serves it (within 1 s: decisions §6.1). */
  async function defineEverywhere(name: string, def: Record<string, unknown>): Promise<void> {
    await defineQueue(nodes[0]!, HOST, name, { access: PUBLIC_ACCESS, ...def });
    const deadline = Date.now() + 1000;
    for (const n of nodes) {
      while ((await call(n, `/${name}/items/ffffffffffffffff`)).json.error === 'not found') {
        if (Date.now() > deadline) throw new Error(`queue ${name} not served by ${n.url} within 1 s of its PUT`);
        await sleep(20);
      }
    }
  }

  function call(node: TestServer, path: string, body?: string, method = body === undefined ? 'GET' : 'POST', headers: Record<string, string> = {}): Promise<{ status: number; json: Json }> {
    if (Object.keys(headers).length === 0) return agentRequest(agent, node.url, path, { method, host: HOST, body });
    return new Promise((resolve, reject) => {
      const u = new URL(node.url);
      const req = http.request({ hostname: u.hostname, port: u.port, path, method, agent, headers: { host: HOST, 'content-type': 'application/json', ...headers } }, (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as Json }));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  it('items posted across three nodes are each worked exactly once at a time, through a kill -9 of one node and its restart; nothing acknowledged is lost (decisions §6.1, §3.2, §6)', async () => {
    await defineEverywhere('work', { leaseSeconds: 2, maxAttempts: 10 });
    const posted: string[] = [];
    for (let i = 0; i < 240; i++) {
      const r = await call(nodes[i % 3]!, '/work', JSON.stringify({ i }));
      expect(r.status).to.equal(200);
      posted.push(r.json.id as string);
    }
    /** Every lease handed out: item, worker, lease end. */
    const leases: Array<{ id: string; worker: string; until: number }> = [];
    const finished = new Set<string>();
    let stop = false;

    // Six workers claim round-robin across the nodes, each result handed to the next node.
    const worker = async (w: number): Promise<void> => {
      let turn = w;
      while (!stop) {
        const node = nodes[turn++ % 3]!;
        let claim: { status: number; json: Json };
        try {
          claim = await call(node, '/work/claim', JSON.stringify({ worker: `w${w}`, wait: 1 }));
        } catch {
          await sleep(50);
          continue;
        }
        if (claim.status !== 200 || claim.json.empty) continue;
        const id = claim.json.id as string;
        leases.push({ id, worker: `w${w}`, until: (claim.json.lease as { until: number }).until });
        await sleep(5);
        for (let k = 0; ; k++) {
          try {
            const r = await call(nodes[(turn + k) % 3]!, `/work/items/${id}/result`, JSON.stringify({ by: w }));
            if (r.status === 200) {
              finished.add(id);
              break;
            }
          } catch {
            // that node is down: another one takes the result
          }
          await sleep(20);
        }
      }
    };
    const workers = Array.from({ length: 6 }, (_, w) => worker(w));
    while (finished.size < 80) await sleep(20);
    // A worker on the machine of node 1 holds five items when that machine dies: they never
    // finish there, and their leases must come back to the others after leaseSeconds.
    const lost: string[] = [];
    for (let k = 0; k < 5; k++) {
      const claim = await call(nodes[1]!, '/work/claim', JSON.stringify({ worker: 'doomed' }));
      if (claim.json.empty) break;
      lost.push(claim.json.id as string);
      leases.push({ id: claim.json.id as string, worker: 'doomed', until: (claim.json.lease as { until: number }).until });
    }
    expect(lost).to.have.length(5);
    await nodes[1]!.kill9();
    await sleep(1000);
    nodes[1] = await startServer({ root: nodes[1]!.root, masterToken: MASTER, args: ['--store', db().url] });
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const statuses = await Promise.all(posted.map((id, i) => call(nodes[i % 3]!, `/work/items/${id}`)));
      if (statuses.every((s) => s.json.status === 'finished')) break;
      await sleep(250);
    }
    stop = true;
    await Promise.all(workers);

    // Every acknowledged item is finished, read from any node.
    for (const [i, id] of posted.entries()) expect((await call(nodes[(i + 1) % 3]!, `/work/items/${id}`)).json.status, id).to.equal('finished');
    // No item was leased to two workers at once: each lease of an item starts after the one before it ended.
    const byItem = new Map<string, Array<{ until: number }>>();
    for (const l of leases) byItem.set(l.id, [...(byItem.get(l.id) ?? []), l]);
    for (const [id, list] of byItem) {
      list.sort((a, b) => a.until - b.until);
      for (let k = 1; k < list.length; k++) expect(list[k]!.until - 2000, `item ${id} leased again before its lease ended`).to.be.at.least(list[k - 1]!.until);
    }
    // The leases the killed node's worker held came back to the others after leaseSeconds.
    for (const id of lost) expect(byItem.get(id)!.length, id).to.be.at.least(2);
  });

  it('a timeout and a retention purge happen once, whichever node gets there (decisions §6.1, §2.2)', async () => {
    await defineEverywhere('expire', { timeoutSeconds: 1, retainSeconds: 1 });
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push((await call(nodes[i % 3]!, '/expire', '{}')).json.id as string);
    await sleep(3500);
    const client = new pg.Client({ connectionString: db().url });
    await client.connect();
    try {
      const { rows } = await client.query<{ id: string; event: string; n: string }>(`SELECT id, event, count(*) AS n FROM svcq_events WHERE queue = $1 AND event IN ('timedout', 'purged') GROUP BY id, event`, ['expire']);
      const counts = new Map(rows.map((r) => [`${r.id} ${r.event}`, Number(r.n)]));
      for (const id of ids) {
        expect(counts.get(`${id} timedout`), `${id} timed out`).to.equal(1);
        expect(counts.get(`${id} purged`), `${id} purged`).to.equal(1);
      }
    } finally {
      await client.end();
    }
    for (const id of ids) expect((await call(nodes[0]!, `/expire/items/${id}`)).status).to.equal(404);
  });

  it('a claim held on one node is answered within milliseconds of a post on another (decisions §6.1, §3.3)', async () => {
    await defineEverywhere('wake', {});
    for (let round = 0; round < 5; round++) {
      const held = call(nodes[round % 3]!, '/wake/claim', JSON.stringify({ wait: 10 }));
      await sleep(300);
      const postedAt = Date.now();
      const id = (await call(nodes[(round + 1) % 3]!, '/wake', JSON.stringify({ round }))).json.id;
      const answer = await held;
      expect(answer.json.id).to.equal(id);
      expect(Date.now() - postedAt, 'wake-up time').to.be.below(500);
    }
  });

  it('a pause acknowledged by one node holds at once for claims on the others; a resume on a third wakes a claim held on the second within milliseconds (decisions §6.1, §8.4)', async () => {
    await defineEverywhere('paused', {});
    const operator = async (node: TestServer, path: string, method = 'GET'): Promise<Json> => {
      const r = await fetch(`${node.url}/api/v2/queues/${HOST}/paused${path}`, { method, headers: { authorization: `Bearer ${MASTER}` } });
      expect(r.status, path).to.equal(200);
      return (await r.json()) as Json;
    };
    const first = (await call(nodes[0]!, '/paused', JSON.stringify({ n: 1 }))).json.id;
    expect(await operator(nodes[0]!, '/pause', 'POST')).to.deep.equal({ paused: true });
    // No waiting: the pause is read from the database by each claim.
    for (const node of nodes) {
      expect((await call(node, '/paused/claim', '{}')).json).to.deep.equal({ ok: true, empty: true });
      expect((await call(node, '/paused/claim', JSON.stringify({ max: 5 }))).json).to.deep.equal({ ok: true, items: [] });
      expect((await operator(node, '')).paused).to.equal(true);
    }
    let answered = false;
    const held = call(nodes[1]!, '/paused/claim', JSON.stringify({ wait: 10 })).finally(() => (answered = true));
    await sleep(300);
    // A post on another node wakes the held claim, which finds the queue paused and waits on. The
    // wait then outlasts the node's own looks again (250 ms and 1 s after the claim was held, see
    // pg-notifier.ts), so that only the resume's notice can answer the claim before its 10 s end.
    await call(nodes[2]!, '/paused', JSON.stringify({ n: 2 }));
    await sleep(1000);
    expect(answered, 'answered while paused').to.equal(false);
    const resumedAt = Date.now();
    expect(await operator(nodes[2]!, '/resume', 'POST')).to.deep.equal({ paused: false });
    expect((await held).json.id).to.equal(first);
    // Milliseconds on a quiet machine; the bound leaves room for a loaded one (602 ms seen at load 10).
    expect(Date.now() - resumedAt, 'wake-up time').to.be.below(1000);
    for (const node of nodes) expect((await operator(node, '')).paused).to.equal(false);
  });

  it('priorities hold across nodes, and an item delayed on one node is taken by a claim held on another when its time comes, not before (decisions §6.1, §8.1)', async () => {
    // Long leases: the nodes' windows with nothing due are long, and a short delay falls inside them.
    await defineEverywhere('later', { leaseSeconds: 600, retainSeconds: 3600 });
    const low = (await call(nodes[0]!, '/later?priority=-1', '{"n":"low"}')).json.id;
    const plain = (await call(nodes[1]!, '/later', '{"n":"plain"}')).json.id;
    const high = (await call(nodes[2]!, '/later?priority=9', '{"n":"high"}')).json.id;
    const order = [];
    for (const node of nodes) order.push((await call(node, '/later/claim', '{}')).json.id);
    expect(order).to.deep.equal([high, plain, low]);
    for (let round = 0; round < 3; round++) {
      const held = [1, 2].map((k) => call(nodes[(round + k) % 3]!, '/later/claim', JSON.stringify({ wait: 10 })));
      await sleep(200);
      const posted = await call(nodes[round]!, '/later?delay=1', JSON.stringify({ round }));
      const record = (await call(nodes[(round + 1) % 3]!, `/later/items/${posted.json.id as string}`)).json;
      expect(record.runAt).to.equal((record.postedAt as number) + 1000);
      const first = await Promise.race(held);
      const answeredAt = Date.now();
      expect(first.json.id).to.equal(posted.json.id);
      expect(answeredAt, 'not before its time').to.be.at.least(record.runAt as number);
      expect(answeredAt - (record.runAt as number), 'wake-up time after its time').to.be.below(1000);
      // The other held claim finds nothing more: a second post ends it.
      await call(nodes[round]!, '/later', '{}');
      await Promise.all(held);
    }
  });

  it('one idempotency key posted concurrently to every node creates one item (decisions §6.1, §3.5)', async () => {
    await defineEverywhere('once', {});
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => call(nodes[i % 3]!, '/once', '{}', 'POST', { 'idempotency-key': 'order-42' })));
    expect(answers.every((a) => a.status === 200)).to.equal(true);
    expect(new Set(answers.map((a) => a.json.id)).size).to.equal(1);
    const claims = await Promise.all(nodes.map((n) => call(n, '/once/claim', '{}')));
    expect(claims.filter((c) => !c.json.empty)).to.have.length(1);
  });

  it('the database connections killed under load: requests get 503, nothing answered 200 is lost, and the nodes serve again by themselves (decisions §6.1, §6)', async () => {
    await defineEverywhere('cut', {});
    const acknowledged: string[] = [];
    const statuses = new Map<number, number>();
    let stop = false;
    const producer = async (p: number): Promise<void> => {
      for (let i = 0; !stop; i++) {
        try {
          const r = await call(nodes[p % 3]!, '/cut', JSON.stringify({ p, i }));
          statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
          if (r.status === 200) acknowledged.push(r.json.id as string);
          else expect(r.status, JSON.stringify(r.json)).to.equal(503);
        } catch {
          // a connection reset by a node is no answer: nothing was acknowledged
          statuses.set(0, (statuses.get(0) ?? 0) + 1);
        }
      }
    };
    const producers = Array.from({ length: 12 }, (_, p) => producer(p));
    await sleep(500);
    const admin = new pg.Client({ connectionString: db().url });
    await admin.connect();
    try {
      for (let k = 0; k < 3; k++) {
        await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()');
        await sleep(300);
      }
    } finally {
      await admin.end();
    }
    await sleep(2000);
    const before = acknowledged.length;
    await sleep(1000);
    stop = true;
    await Promise.all(producers);
    expect(acknowledged.length, 'posts acknowledged again after the cut').to.be.greaterThan(before);
    // The cut was felt: some requests were refused with 503 while the connections came back.
    expect(statuses.get(503) ?? 0, JSON.stringify([...statuses])).to.be.greaterThan(0);
    // Every item answered 200 is there, whichever node is asked.
    const found = await Promise.all(acknowledged.map((id, i) => call(nodes[(i + 2) % 3]!, `/cut/items/${id}`)));
    expect(found.filter((f) => f.status !== 200).map((f) => f.json)).to.deep.equal([]);
    // And a node's long polls still wake on another node's post (its LISTEN connection came back).
    const held = call(nodes[0]!, '/cut/claim', JSON.stringify({ wait: 10, criteria: { late: true } }));
    await sleep(300);
    await call(nodes[2]!, '/cut', JSON.stringify({ late: true }));
    expect((await held).json.item).to.deep.equal({ late: true });
  });

  it('a definition PUT or DELETE on one node takes effect on every other node within 1 s, and every node shows the same manifest (decisions §6.1, §2.4)', async () => {
    const served = async (node: TestServer, name: string): Promise<boolean> => (await call(node, `/${name}/items/ffffffffffffffff`)).json.error !== 'not found';
    const within = async (what: string, check: () => Promise<boolean>): Promise<number> => {
      const t0 = Date.now();
      while (!(await check())) {
        if (Date.now() - t0 > 1000) throw new Error(`${what} not seen within 1 s`);
        await sleep(10);
      }
      return Date.now() - t0;
    };
    await defineQueue(nodes[0]!, HOST, 'shared', { access: PUBLIC_ACCESS });
    expect(await served(nodes[0]!, 'shared')).to.equal(true);
    await within('the PUT on node 1', () => served(nodes[1]!, 'shared'));
    await within('the PUT on node 2', () => served(nodes[2]!, 'shared'));
    const manifests = await Promise.all(nodes.map((n) => fetch(`${n.url}/api/v2/manifest`, { headers: { authorization: `Bearer ${MASTER}` } }).then((r) => r.text())));
    expect(new Set(manifests).size).to.equal(1);
    expect(JSON.parse(manifests[0]!)).to.have.property(`${HOST}/svc-queues/shared.json`);
    const del = await fetch(`${nodes[2]!.url}/api/v2/def?path=${HOST}/svc-queues/shared.json`, { method: 'DELETE', headers: { authorization: `Bearer ${MASTER}` } });
    expect(del.status).to.equal(200);
    expect(await served(nodes[2]!, 'shared')).to.equal(false);
    await within('the DELETE on node 0', async () => !(await served(nodes[0]!, 'shared')));
    await within('the DELETE on node 1', async () => !(await served(nodes[1]!, 'shared')));
  });
  it('while the database refuses connections, a definition DELETE and the task-history endpoints answer 503 { error }, never 500, and serve again once it is back (decisions §6, §6.1)', async () => {
    await defineEverywhere('outage', {});
    const admin = new pg.Client({ connectionString: db().base });
    await admin.connect();
    const name = new URL(db().url).pathname.slice(1);
    const master = { authorization: `Bearer ${MASTER}` };
    const today = new Date().toISOString().slice(0, 10);
    try {
      await admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS false`);
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [name]);
      for (const path of ['/api/v2/tasks', `/api/v2/tasks/file?name=tasks-${today}.log`]) {
        const r = await fetch(`${nodes[0]!.url}${path}`, { headers: master });
        expect(r.status, path).to.equal(503);
        expect(((await r.json()) as { error: string }).error, path).to.match(/could not read its store/);
      }
      const del = await fetch(`${nodes[1]!.url}/api/v2/def?path=${HOST}/svc-queues/outage.json`, { method: 'DELETE', headers: master });
      expect(del.status).to.equal(503);
      expect(((await del.json()) as { error: string }).error).to.match(/nothing was changed/);
    } finally {
      await admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS true`);
      await admin.end();
    }
    // Back: the refused DELETE changed nothing, and everything answers again by itself.
    const deadline = Date.now() + 15_000;
    let tasks = 0;
    while (Date.now() < deadline && (tasks = (await fetch(`${nodes[0]!.url}/api/v2/tasks`, { headers: master })).status) !== 200) await sleep(100);
    expect(tasks).to.equal(200);
    expect((await call(nodes[1]!, '/outage/items/ffffffffffffffff')).json.error).to.not.equal('not found');
  });
});
