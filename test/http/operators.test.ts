import { execFileSync, spawnSync } from 'node:child_process';
import { expect } from 'chai';
import { request, stableHeaders, type Reply } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { deleteDef, newQueue, type Json, type QueueApi } from './queue-api.js';
import type { QueueDetail, QueueEntry } from '../support/operators.js';

/**
 * Operators (decisions §5.1): `GET /api/v2/queues`, `GET /api/v2/queues/<host>/<name>` and
 * `GET /api/v2/metrics`, against a real server after a scripted lifecycle.
 */

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (label values here never hold quotes or commas). */
function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? '').split(',').filter(Boolean)) {
      const eq = pair.indexOf('=');
      labels[pair.slice(0, eq)] = JSON.parse(pair.slice(eq + 1)) as string;
    }
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

const HOST = 'ops.example.com';
const OTHER_HOST = 'a-ops.example.com';

describe('operators: queues, one queue, metrics (decisions §5.1, black box)', () => {
  const server = serverForSuite();
  /** A GET under /api; `token` null sends none. */
  const api = (path: string, token: string | null = server.masterToken): Promise<Reply> => request(server.url, path, { token: token ?? undefined });

  let q: QueueApi;
  let empty: QueueApi;
  let timing: QueueApi;
  const ids: Record<string, string> = {};
  let leaseE: { worker: string; until: number };
  let leaseF: { worker: string; until: number };
  let postedC = 0;

  before(async () => {
    q = await newQueue(server, HOST, { maxAttempts: 2, leaseSeconds: 300 });
    empty = await newQueue(server, OTHER_HOST);
    timing = await newQueue(server, HOST, { timeoutSeconds: 1 });

    // Seven items A..G, posted one after the other so that their postedAt order is theirs.
    for (const [n, letter] of ['A', 'B', 'C', 'D', 'E', 'F', 'G'].entries()) ids[letter] = await q.post({ n: n + 1 });
    const claim = async (worker: string, criteria?: Json): Promise<Json> => {
      const c = await q.claim({ worker, ...(criteria ? { criteria } : {}) });
      expect(c.id, JSON.stringify(c)).to.be.a('string');
      return c;
    };
    // A: claimed, progress, result → finished.
    expect((await claim('w-a')).id).to.equal(ids.A);
    expect((await q.submit(ids.A!, 'progress', { percent: 50 })).status).to.equal('processing');
    expect((await q.submit(ids.A!, 'result', { output: 'done' })).status).to.equal('finished');
    // B: claimed, error → pending again; claimed again (oldest), error on the last attempt → failed.
    expect((await claim('w-b')).id).to.equal(ids.B);
    expect((await q.submit(ids.B!, 'error', { why: 1 })).status).to.equal('pending');
    expect((await claim('w-b')).id).to.equal(ids.B);
    expect((await q.submit(ids.B!, 'error', { why: 2 })).status).to.equal('failed');
    // C: claimed, error → pending with one attempt, still the oldest pending item.
    expect((await claim('w-c')).id).to.equal(ids.C);
    expect((await q.submit(ids.C!, 'error', { why: 3 })).status).to.equal('pending');
    postedC = (await q.fetch(ids.C!)).postedAt as number;
    // D: cancelled while pending.
    expect((await q.submit(ids.D!, 'cancel')).status).to.equal('cancelled');
    // E: claimed and left so; F: claimed with progress (processing). G stays pending.
    const e = await claim('w-e', { n: 5 });
    expect(e.id).to.equal(ids.E);
    leaseE = e.lease as { worker: string; until: number };
    const f = await claim('w-f', { n: 6 });
    expect(f.id).to.equal(ids.F);
    leaseF = f.lease as { worker: string; until: number };
    expect((await q.submit(ids.F!, 'progress', { percent: 10 })).status).to.equal('processing');

    // One item that times out (timeoutSeconds 1): a fetch after the deadline applies it.
    const t = await timing.post({ t: 1 });
    await new Promise((r) => setTimeout(r, 1100));
    await timing.until(t, (r) => r.status === 'timedout');
  });

  const EXPECTED_COUNTS = { pending: 2, claimed: 1, processing: 1, finished: 1, failed: 1, timedout: 0, cancelled: 1 };
  // Events of the lifecycle above: 7 posts, 6 claims (A, B twice, C, E, F), one each finished and failed.
  const EXPECTED_RATES = { posted: 7 / 60, claimed: 6 / 60, finished: 1 / 60, failed: 1 / 60 };

  it('GET /api/v2/queues lists every defined queue with exact counts, oldest pending age and rates (decisions §5.1)', async () => {
    const before = Date.now();
    const reply = await api('/api/v2/queues');
    const after = Date.now();
    expect(reply.status, reply.text).to.equal(200);
    expect(reply.headers['content-type']).to.equal('application/json; charset=utf-8');
    const { queues } = reply.json as { queues: QueueEntry[] };
    const mine = queues.filter((e) => e.host === HOST || e.host === OTHER_HOST);
    // By host, then by name.
    expect(mine.map((e) => `${e.host}/${e.name}`)).to.deep.equal([`${OTHER_HOST}/${empty.name}`, ...[`${HOST}/${q.name}`, `${HOST}/${timing.name}`].sort()]);
    const entry = mine.find((e) => e.name === q.name)!;
    expect(Object.keys(entry)).to.deep.equal(['host', 'name', 'paused', 'counts', 'oldestPendingAgeMs', 'rates', 'limits', 'active', 'held', 'groupsWaiting', 'deadLetters', 'push']);
    expect(entry.paused).to.equal(false);
    expect(entry.counts).to.deep.equal(EXPECTED_COUNTS);
    expect(entry.rates).to.deep.equal(EXPECTED_RATES);
    expect(Number.isInteger(entry.oldestPendingAgeMs)).to.equal(true);
    expect(entry.oldestPendingAgeMs).to.be.within(before - postedC, after - postedC);

    const none = mine.find((e) => e.name === empty.name)!;
    expect(none).to.deep.equal({
      host: OTHER_HOST,
      name: empty.name,
      paused: false,
      counts: { pending: 0, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 },
      oldestPendingAgeMs: null,
      rates: { posted: 0, claimed: 0, finished: 0, failed: 0 },
      // decisions §8.5, §8.6: a queue without limits or a dead-letter queue.
      limits: { maxActive: null, groupMaxActive: null, rateLimit: null, fairness: 'fifo', deadLetter: null },
      active: 0,
      held: { paused: 0, maxActive: 0, groupMaxActive: 0, rateLimit: 0 },
      groupsWaiting: null,
      deadLetters: null,
      // decisions §9.1: not a push queue.
      push: null,
    });
    const timed = mine.find((e) => e.name === timing.name)!;
    expect(timed.counts.timedout).to.equal(1);
    expect(timed.oldestPendingAgeMs).to.equal(null);
    expect(timed.rates).to.deep.equal({ posted: 1 / 60, claimed: 0, finished: 0, failed: 0 });
  });

  it('GET /api/v2/queues/<host>/<name> adds the oldest pending items and the leases, soonest end first (decisions §5.1)', async () => {
    const reply = await api(`/api/v2/queues/${HOST}/${q.name}`);
    expect(reply.status, reply.text).to.equal(200);
    const detail = reply.json as QueueDetail;
    expect(detail.host).to.equal(HOST);
    expect(detail.name).to.equal(q.name);
    expect(detail.counts).to.deep.equal(EXPECTED_COUNTS);
    expect(detail.rates).to.deep.equal(EXPECTED_RATES);
    expect(detail.oldestPendingAgeMs).to.be.a('number');
    const postedG = (await q.fetch(ids.G!)).postedAt as number;
    // C was re-queued after its error and keeps its postedAt, so it is still ahead of G.
    expect(detail.oldest).to.deep.equal([
      { id: ids.C, postedAt: postedC, attempts: 1 },
      { id: ids.G, postedAt: postedG, attempts: 0 },
    ]);
    expect(detail.leases).to.have.length(2);
    expect(detail.leases[0]).to.deep.equal({ id: ids.E, worker: 'w-e', until: leaseE.until, attempts: 1 });
    // F's progress extended its lease (a heartbeat), so its lease ends after E's.
    expect(detail.leases[1]).to.include({ id: ids.F, worker: 'w-f', attempts: 1 });
    expect(detail.leases[1]!.until).to.be.at.least(leaseF.until);
  });

  it('the single-queue view shows at most 20 oldest items, oldest first (decisions §5.1)', async () => {
    const many = await newQueue(server, HOST);
    const posted: string[] = [];
    for (let i = 0; i < 23; i++) posted.push(await many.post({ i }));
    const detail = (await api(`/api/v2/queues/${HOST}/${many.name}`)).json as QueueDetail;
    expect(detail.counts.pending).to.equal(23);
    expect(detail.oldest.map((o) => o.id)).to.deep.equal(posted.slice(0, 20));
    expect(detail.leases).to.deep.equal([]);
  });

  it('an undefined host/queue pair is 404 { error: "no such queue" } with the master token (decisions §5.1)', async () => {
    for (const path of [`/api/v2/queues/${HOST}/no-such-queue`, `/api/v2/queues/nowhere.example.com/${q.name}`, `/api/v2/queues/${OTHER_HOST}/${q.name}`]) {
      const reply = await api(path);
      expect(reply.status, path).to.equal(404);
      expect(reply.headers['content-type']).to.equal('application/json; charset=utf-8');
      expect(reply.text).to.equal('{"error":"no such queue"}');
    }
  });

  it('a host or queue that is not valid percent-encoding is 400 { error } with the master token, never a 500; the wall without it', async () => {
    for (const path of ['/api/v2/queues/%E0%A4%A/x', `/api/v2/queues/${HOST}/%ZZ`]) {
      const reply = await api(path);
      expect(reply.status, path).to.equal(400);
      expect(reply.json, path).to.deep.equal({ error: 'the request path is not valid percent-encoded UTF-8' });
      expect((await api(path, null)).status, path).to.equal(404);
    }
  });

  it('a deleted queue definition leaves the list and the metrics, counters too (decisions §2.4, §5.1)', async () => {
    const gone = await newQueue(server, HOST);
    await gone.post({ x: 1 });
    const listed = async (): Promise<boolean> => ((await api('/api/v2/queues')).json as { queues: QueueEntry[] }).queues.some((e) => e.name === gone.name);
    const scraped = async (): Promise<string[]> => (await api('/api/v2/metrics')).text.split('\n').filter((l) => l.includes(`queue="${gone.name}"`));
    expect(await listed()).to.equal(true);
    expect(await scraped()).to.include(`svcq_items_posted_total{host="${HOST}",queue="${gone.name}"} 1`);
    await deleteDef(server, `${HOST}/svc-queues/${gone.name}.json`);
    expect(await listed()).to.equal(false);
    expect((await api(`/api/v2/queues/${HOST}/${gone.name}`)).status).to.equal(404);
    // Where queue names come and go, a scrape does not grow with every name ever used.
    expect(await scraped()).to.deep.equal([]);
  });

  describe('the wall (decisions §4, §5.1)', () => {
    let wall: Reply;
    before(async () => {
      wall = await api('/api/v2/no-such-route');
      expect(wall.status).to.equal(404);
      expect(wall.text).to.equal('{"error":"not found"}');
    });
    const same = (reply: Reply, what: string): void => {
      expect(reply.status, what).to.equal(wall.status);
      expect(stableHeaders(reply), what).to.deep.equal(stableHeaders(wall));
      expect(reply.body.equals(wall.body), what).to.equal(true);
    };

    for (const path of ['/api/v2/queues', `/api/v2/queues/${HOST}/QUEUE`, '/api/v2/metrics']) {
      it(`${path} without the master token, with a wrong one, or with a user token is byte-identical to an unknown path's wall`, async () => {
        const p = path.replace('QUEUE', q.name);
        same(await api(p, null), `${p} without a token`);
        same(await api(p, 'not-the-master-token'), `${p} with a wrong token`);
        same(await request(server.url, p, { token: 'some-user-token', host: HOST }), `${p} with a user token`);
        // An undefined queue without the token is the wall too, not "no such queue".
        same(await api(`/api/v2/queues/${HOST}/no-such-queue`, null), 'no such queue without a token');
      });
    }

    it('unlisted methods and near-miss paths get the wall even with the master token', async () => {
      same(await request(server.url, '/api/v2/queues', { method: 'POST', token: server.masterToken, body: '{}' }), 'POST /api/v2/queues');
      same(await request(server.url, '/api/v2/metrics', { method: 'PUT', token: server.masterToken, body: '' }), 'PUT /api/v2/metrics');
      same(await request(server.url, `/api/v2/queues/${HOST}/${q.name}`, { method: 'DELETE', token: server.masterToken }), 'DELETE one queue');
      same(await api('/api/v2/queues/'), 'a trailing slash');
      same(await api('/api/v2/Queues'), 'another case');
      same(await api(`/api/v2/queues/${HOST}`), 'a host without a queue');
      same(await api(`/api/v2/queues/${HOST}/${q.name}/items`), 'a path below a queue');
      same(await api('/api/v2/metrics/'), 'metrics with a trailing slash');
    });
  });

  describe('GET /api/v2/metrics (decisions §5.1)', () => {
    let reply: Reply;
    let all: Sample[];
    before(async () => {
      // One request on each audience first, so that both have observations.
      await q.fetch(ids.A!);
      reply = await api('/api/v2/metrics');
      expect(reply.status, reply.text).to.equal(200);
      all = samples(reply.text);
    });
    const of = (name: string, labels: Record<string, string> = {}): Sample[] =>
      all.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

    it('is Prometheus text 0.0.4', () => {
      expect(reply.headers['content-type']).to.equal('text/plain; version=0.0.4; charset=utf-8');
      expect(reply.headers['access-control-allow-origin']).to.equal('*');
    });

    it('declares every required metric with its type', () => {
      const types = new Map([...reply.text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
      const required: Record<string, string> = {
        svcq_items: 'gauge',
        svcq_items_posted_total: 'counter',
        svcq_items_claimed_total: 'counter',
        svcq_items_finished_total: 'counter',
        svcq_items_failed_total: 'counter',
        svcq_items_timedout_total: 'counter',
        svcq_items_cancelled_total: 'counter',
        svcq_queue_oldest_pending_age_seconds: 'gauge',
        svcq_queue_paused: 'gauge',
        svcq_queue_active: 'gauge',
        svcq_claims_held_total: 'counter',
        svcq_http_request_duration_seconds: 'histogram',
        svcq_store_commit_duration_seconds: 'histogram',
        svcq_store_commit_batch_size: 'histogram',
        // The process metrics Prometheus clients export by default.
        process_cpu_seconds_total: 'counter',
        process_resident_memory_bytes: 'gauge',
        process_start_time_seconds: 'gauge',
        nodejs_heap_size_used_bytes: 'gauge',
      };
      for (const [name, type] of Object.entries(required)) expect(types.get(name), name).to.equal(type);
    });

    it('svcq_items{host,queue,status} holds the counts of every status for each defined queue', () => {
      const items = of('svcq_items', { host: HOST, queue: q.name });
      for (const s of items) expect(Object.keys(s.labels).sort()).to.deep.equal(['host', 'queue', 'status']);
      expect(Object.fromEntries(items.map((s) => [s.labels.status, s.value]))).to.deep.equal(EXPECTED_COUNTS);
      expect(of('svcq_items', { host: OTHER_HOST, queue: empty.name })).to.have.length(7);
    });

    it('the event counters {host,queue} match the lifecycle, 0 where nothing happened', () => {
      const value = (name: string, queue = q.name, host = HOST): number | undefined => {
        const found = of(name, { host, queue });
        expect(found, `${name} ${host}/${queue}`).to.have.length(1);
        expect(Object.keys(found[0]!.labels).sort()).to.deep.equal(['host', 'queue']);
        return found[0]!.value;
      };
      expect(value('svcq_items_posted_total')).to.equal(7);
      expect(value('svcq_items_claimed_total')).to.equal(6);
      expect(value('svcq_items_finished_total')).to.equal(1);
      expect(value('svcq_items_failed_total')).to.equal(1);
      expect(value('svcq_items_cancelled_total')).to.equal(1);
      expect(value('svcq_items_timedout_total')).to.equal(0);
      expect(value('svcq_items_timedout_total', timing.name)).to.equal(1);
      expect(value('svcq_items_posted_total', empty.name, OTHER_HOST)).to.equal(0);
    });

    it('svcq_queue_oldest_pending_age_seconds{host,queue} is the age of the oldest pending item, 0 when none', () => {
      const [age] = of('svcq_queue_oldest_pending_age_seconds', { host: HOST, queue: q.name });
      expect(Object.keys(age!.labels).sort()).to.deep.equal(['host', 'queue']);
      expect(age!.value).to.be.within((Date.now() - postedC) / 1000 - 60, (Date.now() - postedC) / 1000);
      expect(age!.value).to.be.greaterThan(0);
      expect(of('svcq_queue_oldest_pending_age_seconds', { host: OTHER_HOST, queue: empty.name })[0]!.value).to.equal(0);
    });

    it('svcq_http_request_duration_seconds has the labels audience (queue|api) and status', () => {
      const counts = of('svcq_http_request_duration_seconds_count');
      for (const s of counts) {
        expect(Object.keys(s.labels).sort()).to.deep.equal(['audience', 'status']);
        expect(s.labels.audience).to.be.oneOf(['queue', 'api']);
        expect(s.labels.status).to.match(/^\d{3}$/);
      }
      expect(of('svcq_http_request_duration_seconds_count', { audience: 'queue', status: '200' })[0]!.value).to.be.greaterThan(20);
      expect(of('svcq_http_request_duration_seconds_count', { audience: 'api', status: '200' })[0]!.value).to.be.greaterThan(3);
      expect(of('svcq_http_request_duration_seconds_count', { audience: 'api', status: '404' })).to.have.length(1);
      expect(of('svcq_http_request_duration_seconds_bucket', { audience: 'queue', status: '200', le: '+Inf' })).to.have.length(1);
      // Buckets are cumulative and end at +Inf with the count, for every label set.
      for (const c of counts) {
        const buckets = of('svcq_http_request_duration_seconds_bucket', c.labels);
        expect(buckets.map((b) => b.value)).to.deep.equal([...buckets.map((b) => b.value)].sort((x, y) => x - y));
        expect(buckets.at(-1)!.labels.le).to.equal('+Inf');
        expect(buckets.at(-1)!.value).to.equal(c.value);
        expect(of('svcq_http_request_duration_seconds_sum', c.labels)[0]!.value).to.be.greaterThan(0);
      }
    });

    it('the store commit histograms have seen the group commits', () => {
      expect(of('svcq_store_commit_duration_seconds_count')[0]!.value).to.be.greaterThan(0);
      expect(of('svcq_store_commit_batch_size_count')[0]!.value).to.be.greaterThan(0);
      // Every posted item is one change at least, and each commit carries at least one.
      expect(of('svcq_store_commit_batch_size_sum')[0]!.value).to.be.at.least(of('svcq_store_commit_batch_size_count')[0]!.value);
    });

    it('passes promtool check metrics with exit 0, prom-client defaults included, and the svcq metrics with no lint remark', function () {
      const which = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
      if (which.status !== 0) {
        console.log('      promtool is not installed (apt-get install prometheus): skipping the promtool check');
        this.skip();
      }
      // All of it, prom-client's default metrics included: no parse error and no lint remark (exit 0).
      const whole = spawnSync('promtool', ['check', 'metrics'], { input: reply.text, encoding: 'utf8' });
      expect(whole.status, whole.stdout + whole.stderr).to.equal(0);
      // The svcq metrics alone: no remark whatsoever.
      const ours = reply.text
        .split('\n')
        .filter((l) => /^(# (HELP|TYPE) )?svcq_/.test(l))
        .join('\n');
      const output = execFileSync('promtool', ['check', 'metrics'], { input: `${ours}\n`, encoding: 'utf8' });
      expect(output.trim()).to.equal('');
    });
  });
});

describe('operators: rates are per second over the last 60 s (decisions §5.1, fake clock)', () => {
  it('counts posted, claimed, finished and failed events in one-second slots and forgets them after 60 s', async () => {
    const { EventRates } = await import('../../src/operators/rates.js');
    let now = 1_000_000_000_000;
    const rates = new EventRates(() => now);
    rates.record('h/q', ['posted', 'posted', 'claimed', 'progress', 'requeued']);
    now += 30_000;
    rates.record('h/q', ['finished', 'failed', 'posted']);
    rates.record('h/other', ['posted']);
    expect(rates.rates('h/q')).to.deep.equal({ posted: 3 / 60, claimed: 1 / 60, finished: 1 / 60, failed: 1 / 60 });
    // 59.999 s after the first events they still count; at 60 s they have left the window.
    now += 29_999;
    expect(rates.rates('h/q').posted).to.equal(3 / 60);
    now += 1;
    expect(rates.rates('h/q')).to.deep.equal({ posted: 1 / 60, claimed: 0, finished: 1 / 60, failed: 1 / 60 });
    // A slot reused a minute later starts from zero.
    now += 30_000;
    rates.record('h/q', ['posted']);
    expect(rates.rates('h/q')).to.deep.equal({ posted: 1 / 60, claimed: 0, finished: 0, failed: 0 });
    expect(rates.rates('h/never')).to.deep.equal({ posted: 0, claimed: 0, finished: 0, failed: 0 });
    expect(rates.rates('h/other').posted).to.equal(0);
  });
});
