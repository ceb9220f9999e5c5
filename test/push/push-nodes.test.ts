import { expect } from 'chai';
import { defineQueue, PUBLIC_ACCESS, QueueApi } from '../http/queue-api.js';
import type { PushTarget } from '../support/push-target.js';
import { nodesAndTarget, taskEvents, terminal } from './support.js';

/**
 * At least once across nodes (decisions §9.1, §6.1): three real `svcq serve` processes on one
 * PostgreSQL database work one push queue; the target holds every request, so that each node has
 * its `concurrency` deliveries in flight; one node is killed with SIGKILL mid-delivery. Its leases
 * end, the other nodes deliver those items again, and every item is delivered at least once and
 * finished exactly once.
 */

const HOST = 'push-nodes.example.com';
const MASTER = 'master-push-nodes-0123456789abcdef';
const ITEMS = 20;
const CONCURRENCY = 4;

describe('a push queue on three nodes, one killed mid-delivery (decisions §9.1, §6.1)', function () {
  this.timeout(60_000);
  const { nodes, target: targetOf } = nodesAndTarget(3, MASTER);
  let target: PushTarget;
  beforeEach(() => (target = targetOf()));

  it('every item is delivered at least once and finished exactly once', async () => {
    await defineQueue(nodes[0]!, HOST, 'hooks', { access: PUBLIC_ACCESS, leaseSeconds: 1, maxAttempts: 5, push: { url: `${target.url}/hold`, timeoutSeconds: 3, concurrency: CONCURRENCY } });
    const q = new QueueApi(nodes[1]!, HOST, 'hooks');
    // Another node serves the queue once it has heard of the definition (decisions §6.1: within a
    // second, more on a loaded machine): until then it answers not found, as for any queue it has not.
    for (const until = Date.now() + 10_000; ((await q.fetchRaw('ffffffffffffffff')).json as { error?: string }).error === 'not found'; await new Promise((r) => setTimeout(r, 20))) {
      if (Date.now() > until) throw new Error('node 1 did not serve the queue within 10 s of its PUT');
    }
    const ids: string[] = [];
    for (let i = 0; i < ITEMS; i++) ids.push(await q.post({ i }));
    // Each node holds its concurrency in flight: 12 requests held at once can only come from all three.
    await target.heldCount(3 * CONCURRENCY);
    expect(target.maxInFlight).to.equal(3 * CONCURRENCY);
    await nodes[0]!.kill9();
    // From here the target answers every request at once, the held ones first.
    target.releaseHeld();
    target.custom = (_, res) => res.end('{"ok":true}');
    const answering = setInterval(() => target.releaseHeld(), 20);
    let records;
    try {
      // The killed node's leases end (leaseSeconds is timeoutSeconds + 5 = 8 s for a push queue) and the others deliver those items.
      records = await Promise.all(ids.map((id) => terminal(q, id, 40)));
    } finally {
      clearInterval(answering);
    }
    expect(records.map((r) => r.status)).to.deep.equal(ids.map(() => 'finished'));
    const delivered = new Set(target.received.map((r) => r.headers['svcq-item-id']));
    for (const id of ids) expect(delivered.has(id), `item ${id} delivered`).to.equal(true);
    // Some items were delivered twice (those the killed node had in flight), each finished once.
    expect(target.received.length).to.be.greaterThan(ITEMS);
    const events = await taskEvents(nodes[2]!, HOST, 'hooks');
    for (const id of ids) expect(events.filter((e) => e.id === id && e.event === 'finished'), `finished events of ${id}`).to.have.length(1);
    const requeued = events.filter((e) => e.event === 'requeued' || e.event === 'timedout');
    expect(requeued.length, 'leases the killed node left to end').to.be.at.least(CONCURRENCY);
  });
});
