import { expect } from 'chai';
import { serverForSuite } from '../support/server.js';
import { newQueue, type Json } from './queue-api.js';

/**
 * Post options (decisions §8.1) as a black box: `delay`, `at`, `priority` and `group` as query
 * parameters of a post and of a batch, checked at the boundary, and what the status record and
 * claims then show.
 */

const HOST = 'priority.example.com';

describe('post options: delay, at, priority, group (decisions §8.1, black box)', function () {
  this.timeout(30_000);
  const server = serverForSuite();

  it('a claim takes the highest priority first, then the oldest; the status record shows priority and group (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const older = await q.post({ n: 1 });
    const plain = await q.post({ n: 2 });
    const high = (await q.raw('POST', `/${q.name}?priority=10&group=tenant-7`, '{"n":3}')).json as Json;
    const mid = (await q.raw('POST', `/${q.name}?priority=-3`, '{"n":4}')).json as Json;
    expect(await q.fetch(high.id as string)).to.deep.include({ priority: 10, group: 'tenant-7', runAt: null, status: 'pending' });
    expect(await q.fetch(plain)).to.deep.include({ priority: 0, group: null, runAt: null });
    const order: unknown[] = [];
    for (let i = 0; i < 4; i++) order.push((await q.claim({ worker: 'w' })).id);
    expect(order).to.deep.equal([high.id, older, plain, mid.id]);
  });

  it('a delayed item is pending with runAt, not claimable before it, and a held claim gets it when its time comes (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const reply = await q.raw('POST', `/${q.name}?delay=1`, '{"later":true}');
    expect(reply.status, reply.text).to.equal(200);
    const id = (reply.json as Json).id as string;
    const record = await q.fetch(id);
    expect(record).to.deep.include({ status: 'pending', runAt: (record.postedAt as number) + 1000 });
    expect(await q.claim({ worker: 'w' })).to.deep.equal({ ok: true, empty: true });
    const claimed = await q.claim({ worker: 'w', wait: 10 });
    expect(claimed.id).to.equal(id);
    expect(Date.now(), 'held until its time').to.be.at.least((record.postedAt as number) + 1000);
    expect(await q.fetch(id)).to.deep.include({ status: 'claimed', runAt: null });
  });

  it('at: a time already past is claimable at once; a later one shows as runAt (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const later = Date.now() + 3_600_000;
    const a = (await q.raw('POST', `/${q.name}?at=${later}`, '{}')).json as Json;
    const b = (await q.raw('POST', `/${q.name}?at=1000`, '{}')).json as Json;
    expect(await q.fetch(a.id as string)).to.deep.include({ runAt: later });
    expect(await q.fetch(b.id as string)).to.deep.include({ runAt: null });
    expect((await q.claim({ worker: 'w' })).id).to.equal(b.id);
    expect(await q.claim({ worker: 'w' })).to.deep.equal({ ok: true, empty: true });
  });

  it('a batch\'s options apply to each of its items (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const plain = await q.post({});
    const reply = await q.raw('POST', `/${q.name}/batch?priority=5&group=g`, '[{"i":0},{"i":1}]');
    expect(reply.status, reply.text).to.equal(200);
    const ids = ((reply.json as Json).items as Json[]).map((i) => i.id);
    for (const id of ids) expect(await q.fetch(id as string)).to.deep.include({ priority: 5, group: 'g' });
    expect([(await q.claim({ worker: 'w' })).id, (await q.claim({ worker: 'w' })).id, (await q.claim({ worker: 'w' })).id]).to.deep.equal([...ids, plain]);
  });

  it('a post repeating an Idempotency-Key returns the first item whatever its options (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const first = await q.raw('POST', `/${q.name}?priority=2`, '{"n":1}', { headers: { 'idempotency-key': 'once' } });
    const again = await q.raw('POST', `/${q.name}?priority=-2&delay=60&group=x`, '{"n":2}', { headers: { 'idempotency-key': 'once' } });
    expect((again.json as Json).id).to.equal((first.json as Json).id);
    expect(await q.fetch((first.json as Json).id as string)).to.deep.include({ priority: 2, group: null, runAt: null });
  });

  it('an unknown query parameter, a repeated one, a value out of range, or delay with at: 400 naming each as ?<name>, and nothing is created (decisions §8.1)', async () => {
    const q = await newQueue(server, HOST);
    const cases: Array<[string, string[]]> = [
      ['delay=31536001', ['?delay']],
      ['delay=-1', ['?delay']],
      ['delay=1.5', ['?delay']],
      ['priority=101', ['?priority']],
      ['priority=-101', ['?priority']],
      ['priority=1&priority=2', ['?priority']],
      ['at=soon', ['?at']],
      ['delay=5&at=1700000000000', ['?at']],
      [`group=${'g'.repeat(129)}`, ['?group']],
      ['group=', ['?group']],
      ['group=%C3%A9', ['?group']],
      ['colour=red', ['?colour']],
      ['priority=x&wait=5', ['?priority', '?wait']],
    ];
    for (const [query, paths] of cases) {
      for (const path of [`/${q.name}?${query}`, `/${q.name}/batch?${query}`]) {
        const reply = await q.raw('POST', path, path.includes('/batch') ? '[{}]' : '{}');
        expect(reply.status, `${path}: ${reply.text}`).to.equal(400);
        const body = reply.json as { ok: boolean; errors: Array<{ path: string; message: string }> };
        expect(body.ok).to.equal(false);
        expect(body.errors.map((e) => e.path), path).to.deep.equal(paths);
        for (const e of body.errors) expect(e.message, path).to.match(/^\w+ .+/);
      }
    }
    expect(await q.claim({ worker: 'w' })).to.deep.equal({ ok: true, empty: true });
  });
});
