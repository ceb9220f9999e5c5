import { expect } from 'chai';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS, QueueApi, uniqueName, type Json } from '../http/queue-api.js';
import { PushTarget } from '../support/push-target.js';
import { metric, queueView, signatureChecks, taskEvents, terminal, until } from './support.js';
import { until as untilTrue } from '../worker/support.js';

/**
 * Push queues (decisions §9.1) as a black box: a real `svcq serve` (on the store the run chooses,
 * embedded or PostgreSQL) delivering to real HTTP targets this test starts: answering at once,
 * slow beyond the timeout, failing, 429 with Retry-After, resetting, never answering, redirecting
 * to a URL outside the allow-list.
 */

const HOST = 'push.example.com';
const SECRET = 'a-push-secret-of-32-characters!!';

describe('push queues: the server delivers each item to an HTTP target (decisions §9.1, black box)', function () {
  this.timeout(40_000);
  let target: PushTarget;
  /** Outside the allow-list: it must never be called. */
  let outside: PushTarget;
  let server: TestServer;

  before(async () => {
    target = await PushTarget.start();
    outside = await PushTarget.start();
    server = await startServer({ args: ['--push-allow', `${target.url}/`] });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
    await target.stop();
    await outside.stop();
  });

  async function pushQueue(path: string, push: Record<string, unknown> = {}, def: Record<string, unknown> = {}): Promise<QueueApi> {
    const name = uniqueName('push');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, ...def, push: { url: `${target.url}${path}`, ...push } });
    return new QueueApi(server, HOST, name);
  }

  it('POSTs the exact item with its headers, signed; a 2xx JSON object is the result, with a delivered event carrying the code and the time', async () => {
    const q = await pushQueue('/ok', { secret: SECRET, headers: { 'X-Team': 'blue' } });
    const body = '{"order": 17,  "note":"exact bytes"}';
    const seen = new Promise<Json>((resolve) => target.once('request', resolve));
    const id = await q.post(body);
    const got = (await seen) as unknown as { headers: Record<string, string>; body: string };
    expect(got.body).to.equal(body);
    expect(got.headers['content-type']).to.equal('application/json');
    expect(got.headers['x-team']).to.equal('blue');
    expect(got.headers['svcq-queue']).to.equal(`${HOST}/${q.name}`);
    expect(got.headers['svcq-item-id']).to.equal(id);
    expect(got.headers['svcq-attempt']).to.equal('1');
    expect(signatureChecks(got.headers, got.body, SECRET)).to.equal(true);
    expect(signatureChecks(got.headers, got.body, 'another-secret-of-32-characters!')).to.equal(false);
    const record = await terminal(q, id);
    expect(record.status).to.equal('finished');
    expect(record.result).to.deep.equal({ got: { order: 17, note: 'exact bytes' } });
    const events = await taskEvents(server, HOST, q.name, id);
    const kinds = events.map((e) => e.event);
    expect(kinds).to.deep.equal(['posted', 'claimed', 'delivered', 'finished']);
    const delivered = events[2]!;
    expect(delivered.code).to.equal(200);
    expect(delivered.ms).to.be.a('number').and.at.least(0);
    expect(delivered.worker).to.match(/^push:/);
    expect(await metric(server, `svcq_push_requests_total{host="${HOST}",queue="${q.name}",outcome="delivered"}`)).to.equal(1);
    expect(await metric(server, `svcq_push_duration_seconds_count{host="${HOST}",queue="${q.name}"}`)).to.equal(1);
  });

  it('a 2xx that is not one JSON object gives { status, body } as the result; no secret, no signature', async () => {
    const q = await pushQueue('/text');
    const seen = new Promise<{ headers: Record<string, string> }>((resolve) => target.once('request', resolve));
    const id = await q.post({ a: 1 });
    expect((await seen).headers['svcq-signature']).to.equal(undefined);
    const record = await terminal(q, id);
    expect(record.status).to.equal('finished');
    expect(record.result).to.deep.equal({ status: 200, body: 'done, thanks' });
  });

  it('a 500 is an error { status, reason, body } retried by the attempts rule; a delivery-failed event carries the code', async () => {
    const q = await pushQueue('/fail', {}, { maxAttempts: 2, retryDelaySeconds: 0 });
    const id = await q.post({ a: 1 });
    const record = await terminal(q, id);
    expect(record.status).to.equal('failed');
    expect(record.attempts).to.equal(2);
    expect(record.error).to.deep.equal({ status: 500, reason: 'the target answered 500', body: 'it broke' });
    const events = await taskEvents(server, HOST, q.name, id);
    expect(events.map((e) => e.event)).to.deep.equal(['posted', 'claimed', 'delivery-failed', 'error', 'requeued', 'claimed', 'delivery-failed', 'error', 'failed']);
    expect(events.filter((e) => e.event === 'delivery-failed').map((e) => e.code)).to.deep.equal([500, 500]);
    expect(await metric(server, `svcq_push_requests_total{host="${HOST}",queue="${q.name}",outcome="answered-error"}`)).to.equal(2);
  });

  it('a 429 with Retry-After: S is retried in S seconds (decisions §8.2 retryIn), not at the queue\'s delay', async () => {
    const q = await pushQueue('/busy?after=120', {}, { maxAttempts: 5, retryDelaySeconds: 0 });
    const before = Date.now();
    const id = await q.post({ a: 1 });
    const record = await until(q, id, (r) => r.error !== null && r.status === 'pending');
    expect(record.error).to.include({ status: 429, reason: 'the target answered 429', body: 'slow down' });
    expect(record.runAt as number).to.be.within(before + 119_000, Date.now() + 121_000);
  });

  it('a reset connection, a target that never answers and one slower than timeoutSeconds are errors with status null and a sentence', async () => {
    const reset = await pushQueue('/reset', {}, { maxAttempts: 1 });
    const hang = await pushQueue('/hang', { timeoutSeconds: 1 }, { maxAttempts: 1 });
    const slow = await pushQueue('/slow?ms=3000', { timeoutSeconds: 1 }, { maxAttempts: 1 });
    const [a, b, c] = await Promise.all([reset.post({}), hang.post({}), slow.post({})]);
    const [ra, rb, rc] = await Promise.all([terminal(reset, a), terminal(hang, b), terminal(slow, c)]);
    expect(ra.status).to.equal('failed');
    expect(ra.error).to.deep.equal({ status: null, reason: 'the connection was closed before an answer', body: '' });
    expect(rb.error).to.deep.equal({ status: null, reason: 'no answer within 1 s', body: '' });
    expect(rc.error).to.deep.equal({ status: null, reason: 'no answer within 1 s', body: '' });
    const timedOut = (await taskEvents(server, HOST, hang.name, b)).find((e) => e.event === 'delivery-failed');
    expect(timedOut?.code).to.equal(null);
    expect(timedOut?.ms).to.be.at.least(900);
  });

  it('follows no redirect: a 3xx to a URL outside the allow-list is a failed delivery, and that URL is never called', async () => {
    const q = await pushQueue(`/redirect?to=${encodeURIComponent(`${outside.url}/ok`)}`, {}, { maxAttempts: 1 });
    const id = await q.post({ a: 1 });
    const record = await terminal(q, id);
    expect(record.status).to.equal('failed');
    const error = record.error as Json;
    expect(error.status).to.equal(302);
    expect(error.reason).to.equal(`the target answered 302, a redirect to ${outside.url}/ok, which is not followed`);
    expect(outside.received).to.have.length(0);
  });

  it('no more than concurrency deliveries at once on a node, and no more than maxActive leased', async () => {
    const slow = (ms: number) => (_: unknown, res: import('node:http').ServerResponse) => setTimeout(() => res.end('{}'), ms);
    target.custom = slow(60);
    target.maxInFlight = 0;
    const q = await pushQueue('/custom', { concurrency: 3 });
    const ids = (await q.raw('POST', `/${q.name}/batch`, JSON.stringify(Array.from({ length: 12 }, (_, i) => ({ i }))))).json as Json;
    for (const id of (ids.items as Json[]).map((i) => i.id as string)) expect((await terminal(q, id)).status).to.equal('finished');
    expect(target.maxInFlight).to.equal(3);

    target.maxInFlight = 0;
    const capped = await pushQueue('/custom', { concurrency: 10 }, { maxActive: 2 });
    const more = (await capped.raw('POST', `/${capped.name}/batch`, JSON.stringify(Array.from({ length: 8 }, (_, i) => ({ i }))))).json as Json;
    for (const id of (more.items as Json[]).map((i) => i.id as string)) expect((await terminal(capped, id)).status).to.equal('finished');
    expect(target.maxInFlight).to.equal(2);
  });

  it('claims up to concurrency items ahead of its requests on a queue with no limit (as svcq work prefetches), none on a limited one; concurrency still bounds the requests', async () => {
    const claimedNow = async (q: QueueApi): Promise<number> => ((await queueView(server, q)).counts as Json).claimed as number;
    for (const [def, ahead] of [[{}, 2], [{ maxActive: 10 }, 0]] as const) {
      target.maxInFlight = 0;
      const q = await pushQueue('/hold', { concurrency: 2 }, def);
      const before = target.heldNow;
      const ids = ((await q.raw('POST', `/${q.name}/batch`, JSON.stringify(Array.from({ length: 6 }, (_, i) => ({ i }))))).json as { items: Json[] }).items.map((i) => i.id as string);
      await target.heldCount(before + 2);
      // The claim ahead follows the claim that filled the slots; read until it is there (5 s at most).
      if (ahead > 0) await untilTrue(async () => (await claimedNow(q)) >= 2 + ahead, 'the items claimed ahead', 5000);
      expect(await claimedNow(q)).to.equal(2 + ahead);
      expect((await queueView(server, q)).push).to.deep.include({ inFlight: 2, claimedAhead: ahead });
      expect(target.heldNow - before).to.equal(2);
      const answering = setInterval(() => target.releaseHeld(), 20);
      try {
        for (const id of ids) expect((await terminal(q, id)).status).to.equal('finished');
      } finally {
        clearInterval(answering);
      }
      expect(target.maxInFlight).to.equal(2);
    }
  });

  it('a paused queue delivers nothing until resumed; the queue view shows the target, deliveries in flight and a failing target', async () => {
    const q = await pushQueue('/hold');
    const pause = (action: string) => request(server.url, `/api/v2/queues/${HOST}/${q.name}/${action}`, { method: 'POST', token: server.masterToken });
    expect((await pause('pause')).status).to.equal(200);
    const id = await q.post({ a: 1 });
    // The push worker's claim is held like any worker's: a claim of our own, made after it, finds nothing either.
    expect((await q.claim({ wait: 1 })).empty).to.equal(true);
    expect(target.heldNow).to.equal(0);
    const held = target.heldCount(1);
    expect((await pause('resume')).status).to.equal(200);
    await held;
    const view = await queueView(server, q);
    expect(view.push).to.deep.include({ url: `${target.url}/hold`, inFlight: 1, concurrency: 10, failing: false, consecutiveFailures: 0, lastError: null, refused: false });
    target.releaseHeld();
    expect((await terminal(q, id)).status).to.equal('finished');
    expect(((await queueView(server, q)).push as Json).last).to.deep.include({ outcome: 'delivered', code: 200 });

    const failing = await pushQueue('/fail', {}, { maxAttempts: 1 });
    await terminal(failing, await failing.post({}));
    const bad = (await queueView(server, failing)).push as Json;
    expect(bad).to.deep.include({ failing: true, consecutiveFailures: 1, lastError: 'the target answered 500', inFlight: 0 });
    const list = (await request(server.url, '/api/v2/queues', { token: server.masterToken })).json as { queues: Json[] };
    expect(list.queues.find((e) => e.name === failing.name)?.push).to.deep.include({ failing: true });
    expect(list.queues.find((e) => e.name === q.name)?.push).to.deep.include({ failing: false });
  });
});

describe('push queues and the allow-list, and a stop (decisions §9, §9.1, black box)', function () {
  this.timeout(40_000);
  let target: PushTarget;
  const servers: TestServer[] = [];
  before(async () => {
    target = await PushTarget.start();
  });
  after(async () => {
    for (const s of servers) await s.stop();
    for (const root of new Set(servers.map((s) => s.root))) cleanupTemp(root);
    await target.stop();
  });

  it('a queue whose URL a restart left outside --push-allow is not delivered: its items wait, and the view says why', async () => {
    const first = await startServer({ args: ['--push-allow', `${target.url}/`] });
    servers.push(first);
    const name = uniqueName('push');
    await defineQueue(first, HOST, name, { access: PUBLIC_ACCESS, push: { url: `${target.url}/ok` } });
    await first.stop();
    const second = await startServer({ root: first.root, args: ['--push-allow', 'http://127.0.0.1:1/'] });
    servers.push(second);
    const q = new QueueApi(second, HOST, name);
    const id = await q.post({ a: 1 });
    const view = (await queueView(second, q)).push as Json;
    expect(view).to.deep.include({ refused: true, failing: true, inFlight: 0 });
    expect(view.lastError).to.match(/is not a URL this server may call/);
    expect(second.output()).to.match(/is not a URL this server may call/);
    // A worker may still claim it: nothing else has it.
    const claimed = await q.claim({ wait: 0 });
    expect(claimed.id).to.equal(id);
    expect(target.received).to.have.length(0);
  });

  it('a stopped server takes no new delivery, and releases those still in flight after its grace and those claimed ahead at once (attempt not counted); the next start delivers them', async () => {
    const server = await startServer({ args: ['--push-allow', `${target.url}/`, '--shutdown-grace', '1'] });
    servers.push(server);
    const name = uniqueName('push');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, push: { url: `${target.url}/hold`, concurrency: 2 } });
    const q = new QueueApi(server, HOST, name);
    const ids = [await q.post({ n: 1 }), await q.post({ n: 2 }), await q.post({ n: 3 })];
    await target.heldCount(2);
    // The third is claimed ahead (no limit on the queue): read until it is (5 s at most).
    await untilTrue(async () => ((await queueView(server, q)).push as Json).claimedAhead === 1, 'the third item claimed ahead', 5000);
    expect(((await queueView(server, q)).push as Json).claimedAhead).to.equal(1);
    expect(await server.stop()).to.equal(0);
    expect(target.received.filter((r) => r.path === '/hold')).to.have.length(2);
    const again = await startServer({ root: server.root, args: ['--push-allow', `${target.url}/`] });
    servers.push(again);
    const q2 = new QueueApi(again, HOST, name);
    // From here the target answers at once: every held request answered, later ones too.
    const answering = setInterval(() => target.releaseHeld(), 20);
    try {
      for (const id of ids) {
        const record = await terminal(q2, id);
        expect(record.status).to.equal('finished');
        // The released attempt was not counted: one attempt, the delivery that finished it.
        expect(record.attempts).to.equal(1);
      }
    } finally {
      clearInterval(answering);
    }
    // Released: the two in flight, and the third, claimed ahead and never sent before the stop (as counted above).
    const released = (await taskEvents(again, HOST, name)).filter((e) => e.event === 'released').map((e) => e.id as string);
    expect(released.sort()).to.deep.equal([...ids].sort());
  });

  it('a stop finishes the deliveries that end within its grace', async () => {
    const server = await startServer({ args: ['--push-allow', `${target.url}/`, '--shutdown-grace', '10'] });
    servers.push(server);
    const name = uniqueName('push');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, push: { url: `${target.url}/hold` } });
    const q = new QueueApi(server, HOST, name);
    const id = await q.post({ n: 1 });
    await target.heldCount(1);
    const stopped = server.stop();
    setTimeout(() => target.releaseHeld(), 300);
    expect(await stopped).to.equal(0);
    const again = await startServer({ root: server.root, args: ['--push-allow', `${target.url}/`] });
    servers.push(again);
    expect((await new QueueApi(again, HOST, name).fetch(id)).status).to.equal('finished');
  });
});
