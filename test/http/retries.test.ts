import { expect } from 'chai';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { newQueue, type Json } from './queue-api.js';

/**
 * Retries as the queue and the worker say (decisions §8.2) as a black box: backoff fields in a
 * definition, `?retryIn` and `?final` on the error endpoint, the same as fields of a hand-in, and
 * the release endpoint, each checked at the boundary (a bad value is a 400 and nothing is applied).
 */

const HOST = 'retries.example.com';

describe('retries: backoff, retryIn, final, release (decisions §8.2, black box)', function () {
  this.timeout(30_000);
  const server = serverForSuite();

  it('a definition takes retryBackoff, retryDelayMaxSeconds and retryJitter, and refuses bad ones naming the field (decisions §8.2)', async () => {
    const q = await newQueue(server, HOST, { retryDelaySeconds: 60, retryBackoff: 'exponential', retryDelayMaxSeconds: 600, retryJitter: 0.25, maxAttempts: 5 });
    const id = await q.post({});
    await q.claim({ worker: 'w' });
    expect((await q.raw('POST', `/${q.name}/items/${id}/error`, '{}')).json).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
    const record = await q.fetch(id);
    const wait = (record.runAt as number) - (record.updatedAt as number);
    expect(wait).to.be.within(45_000, 60_000);
    for (const [field, value] of [['retryBackoff', 'linear'], ['retryDelayMaxSeconds', 0], ['retryJitter', 1.5]] as const) {
      const reply = await request(server.url, `/api/v2/def?path=${HOST}/svc-queues/${q.name}.json`, { method: 'PUT', token: server.masterToken, body: JSON.stringify({ [field]: value }) });
      expect(reply.status, `${field}: ${JSON.stringify(value)}`).to.equal(400);
      expect(JSON.stringify(reply.json)).to.contain(field);
    }
  });

  it('the error endpoint takes ?retryIn or ?final; both, or a bad value, is a 400 naming it and nothing is applied (decisions §8.2)', async () => {
    const q = await newQueue(server, HOST, { retryDelaySeconds: 3600, maxAttempts: 5 });
    const id = await q.post({});
    await q.claim({ worker: 'w' });
    for (const query of ['retryIn=5&final=true', 'retryIn=-1', 'retryIn=1.5', 'retryIn=31536001', 'final=yes', 'retryIn=1&retryIn=2']) {
      const reply = await q.raw('POST', `/${q.name}/items/${id}/error?${query}`, '{"e":1}');
      expect(reply.status, query).to.equal(400);
      expect((reply.json as Json).ok).to.equal(false);
      expect(JSON.stringify(reply.json), query).to.match(/\?(retryIn|final)/);
    }
    expect(await q.fetch(id)).to.deep.include({ status: 'claimed', error: null, attempts: 1 });
    expect((await q.raw('POST', `/${q.name}/items/${id}/error?retryIn=0`, '{"e":2}')).json).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
    expect(await q.fetch(id)).to.deep.include({ status: 'pending', runAt: null, error: { e: 2 } });
    expect((await q.claim({ worker: 'w' })).id).to.equal(id);
    expect((await q.raw('POST', `/${q.name}/items/${id}/error?final=true`, '{"e":3}')).json).to.deep.equal({ ok: true, accepted: true, status: 'failed' });
    expect(await q.fetch(id)).to.deep.include({ status: 'failed', attempts: 2, error: { e: 3 } });
  });

  it('a hand-in carries retryIn or final beside its error; with a result, or both at once, the whole claim is a 400 and nothing is applied (decisions §3.8, §8.2)', async () => {
    const q = await newQueue(server, HOST, { retryDelaySeconds: 3600, maxAttempts: 5 });
    const [a, b] = [await q.post({ n: 1 }), await q.post({ n: 2 })];
    await q.claim({ worker: 'w', max: 2 });
    for (const done of [[{ id: a, result: {}, retryIn: 1 }], [{ id: a, error: {}, retryIn: 1, final: true }], [{ id: a, error: {}, retryIn: -1 }], [{ id: a, error: {}, final: 'yes' }]]) {
      const reply = await q.raw('POST', `/${q.name}/claim`, JSON.stringify({ worker: 'w', done }));
      expect(reply.status, JSON.stringify(done)).to.equal(400);
    }
    expect(await q.fetch(a)).to.deep.include({ status: 'claimed', attempts: 1 });
    const reply = await q.raw('POST', `/${q.name}/claim`, JSON.stringify({ worker: 'w', done: [{ id: a, error: { e: 1 }, retryIn: 2 }, { id: b, error: { e: 2 }, final: true }] }));
    expect(reply.status, reply.text).to.equal(200);
    expect((reply.json as Json).done).to.deep.equal([
      { id: a, ok: true, accepted: true, status: 'pending' },
      { id: b, ok: true, accepted: true, status: 'failed' },
    ]);
    const record = await q.fetch(a);
    expect((record.runAt as number) - (record.updatedAt as number)).to.equal(2000);
    expect(await q.fetch(b)).to.deep.include({ status: 'failed', attempts: 1 });
    // A held claim takes the item when its retryIn ends.
    expect((await q.claim({ worker: 'w', wait: 10 })).id).to.equal(a);
  });

  it('release hands a leased item back in its place without counting the claim; ?delay holds it; any other item is answered accepted: false (decisions §8.2)', async () => {
    const q = await newQueue(server, HOST, { maxAttempts: 1 });
    const [a, b] = [await q.post({ n: 1 }), await q.post({ n: 2 })];
    expect((await q.claim({ worker: 'w' })).id).to.equal(a);
    expect((await q.raw('POST', `/${q.name}/items/${a}/release`)).json).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
    expect(await q.fetch(a)).to.deep.include({ status: 'pending', attempts: 0, runAt: null });
    expect((await q.raw('POST', `/${q.name}/items/${a}/release`)).json).to.deep.equal({ ok: true, accepted: false, status: 'pending' });
    expect((await q.claim({ worker: 'w' })).id, 'in its place, before b').to.equal(a);
    expect((await q.raw('POST', `/${q.name}/items/${a}/release?delay=1`)).json).to.deep.equal({ ok: true, accepted: true, status: 'pending' });
    const held = await q.fetch(a);
    expect((held.runAt as number) - (held.updatedAt as number)).to.equal(1000);
    expect((await q.claim({ worker: 'w' })).id, 'b meanwhile').to.equal(b);
    expect((await q.claim({ worker: 'w', wait: 10 })).id, 'a once its delay ends').to.equal(a);
    expect((await q.raw('POST', `/${q.name}/items/${a}/release?delay=x`)).status).to.equal(400);
    expect((await q.raw('POST', `/${q.name}/items/0123456789abcdef/release`)).status).to.equal(404);
    expect((await q.raw('POST', `/${q.name}/items/${a}/result`, '{}')).json).to.deep.include({ accepted: true, status: 'finished' });
    expect((await q.raw('POST', `/${q.name}/items/${a}/release`)).json).to.deep.equal({ ok: true, accepted: false, status: 'finished' });
  });
});
