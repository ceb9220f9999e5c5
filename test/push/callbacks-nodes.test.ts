import { expect } from 'chai';
import { once } from 'node:events';
import { defineQueue, PUBLIC_ACCESS, QueueApi, type Json } from '../http/queue-api.js';
import type { TestServer } from '../support/server.js';
import type { PushTarget } from '../support/push-target.js';
import { until } from '../worker/support.js';
import { metric, nodesAndTarget, queueView } from './support.js';

/**
 * Callbacks on two nodes (decisions §9.2, §6.1): two real `svcq serve` processes on one PostgreSQL
 * database; items end on both, so both make callbacks owed and both deliver. The receiver answers
 * each request after a short while, and the first request for every third item with a 500, so
 * that retries come due while other nodes look. No item's callback is ever in flight twice at
 * once (no attempt taken by two nodes), each is delivered exactly once (one 200), and nothing stays
 * owed.
 */

const HOST = 'callback-nodes.example.com';
const MASTER = 'master-callback-nodes-0123456789ab';
const ITEMS = 60;

describe('callbacks on two nodes of one PostgreSQL database (decisions §9.2, §6.1)', function () {
  this.timeout(60_000);
  const { nodes, target: targetOf } = nodesAndTarget(2, MASTER);
  let target: PushTarget;
  beforeEach(() => (target = targetOf()));

  it('every callback is delivered exactly once, never in flight twice at once, by either node', async () => {
    await defineQueue(nodes[0]!, HOST, 'ends', { access: PUBLIC_ACCESS, leaseSeconds: 30, callback: `${target.url}/custom` });
    const apis = nodes.map((n) => new QueueApi(n, HOST, 'ends'));
    const active = new Map<string, number>();
    const requests = new Map<string, number>();
    const delivered = new Map<string, number>();
    const overlaps: string[] = [];
    let firstFailures = 0;
    target.custom = (received, res) => {
      const id = String(received.headers['svcq-item-id']);
      const seen = (requests.get(id) ?? 0) + 1;
      requests.set(id, seen);
      if ((active.get(id) ?? 0) > 0) overlaps.push(id);
      active.set(id, (active.get(id) ?? 0) + 1);
      const failFirst = Number(JSON.parse(received.body).result?.i ?? -1) % 3 === 0 && seen === 1;
      setTimeout(() => {
        active.set(id, active.get(id)! - 1);
        if (failFirst) {
          firstFailures++;
          res.statusCode = 500;
          res.end('not yet');
        } else {
          delivered.set(id, (delivered.get(id) ?? 0) + 1);
          res.end('ok');
        }
        target.emit('answered');
      }, 20);
    };
    // Posted and finished alternately on either node: each node makes callbacks owed.
    const ids: string[] = [];
    for (let i = 0; i < ITEMS; i++) ids.push(await apis[i % 2]!.post({ i }));
    for (let i = 0; i < ITEMS; i++) {
      const api = apis[i % 2]!;
      const claimed = await api.claim({ wait: 5 });
      expect(claimed.id, 'an item claimed').to.be.a('string');
      await api.submit(claimed.id as string, 'result', { i: (claimed.item as { i: number }).i });
    }
    while (delivered.size < ITEMS) await once(target, 'answered');
    expect(overlaps, 'items whose callback was in flight twice at once').to.deep.equal([]);
    for (const id of ids) expect(delivered.get(id), `200s for item ${id}`).to.equal(1);
    expect(firstFailures, 'first attempts answered 500').to.equal(ITEMS / 3);
    for (const id of ids) expect(requests.get(id), `attempts for item ${id}`).to.be.at.most(2);
    // Both nodes delivered: each counted attempts of its own.
    for (const node of nodes) expect(await metric(node, `svcq_callbacks_total{host="${HOST}",queue="ends",outcome="delivered"}`), `deliveries counted on ${node.url}`).to.be.greaterThan(0);
    // Settled everywhere: nothing owed, nothing failing.
    await settled(nodes[1]!, apis[1]!);
    expect((await queueView(nodes[1]!, apis[1]!)).callbacks).to.deep.equal({ owed: 0, failing: 0 });
  });

  it('a node stopped while its callbacks are under way hands them back: the other node delivers them within seconds, not when their 60 s holds run out', async () => {
    await defineQueue(nodes[0]!, HOST, 'stops', { access: PUBLIC_ACCESS, leaseSeconds: 30, callback: `${target.url}/custom` });
    const [first, second] = nodes.map((n) => new QueueApi(n, HOST, 'stops')) as [QueueApi, QueueApi];
    const hung: unknown[] = [];
    const delivered = new Set<string>();
    let answering = false;
    target.custom = (received, res) => {
      if (!answering) {
        // Never answered: the attempts are under way when the node stops.
        hung.push(res);
        target.emit('hung');
        return;
      }
      delivered.add(String(received.headers['svcq-item-id']));
      res.end('ok');
      target.emit('answered');
    };
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await first.post({ i }));
    for (let i = 0; i < 4; i++) {
      const claimed = await first.claim({ wait: 5 });
      await first.submit(claimed.id as string, 'result', { i });
    }
    while (hung.length < 4) await once(target, 'hung');
    answering = true;
    const stoppedAt = Date.now();
    expect(await nodes[0]!.stop(), 'the stopped node exits cleanly').to.equal(0);
    while (delivered.size < 4) await once(target, 'answered');
    expect(Date.now() - stoppedAt, 'ms from the stop to the last delivery').to.be.below(15_000);
    expect([...delivered].sort()).to.deep.equal([...ids].sort());
    await settled(nodes[1]!, second);
    expect((await queueView(nodes[1]!, second)).callbacks).to.deep.equal({ owed: 0, failing: 0 });
  });
});

/**
 * Waits (10 s at most) until the queue view counts nothing owed: the target has had its last
 * answer sent when the test reads, and the node records that delivery in a transaction after it,
 * so a read at once can still count it owed.
 */
function settled(node: TestServer, q: QueueApi): Promise<void> {
  return until(async () => ((await queueView(node, q)).callbacks as Json).owed === 0, 'nothing owed', 10_000);
}
