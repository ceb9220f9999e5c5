import net from 'node:net';
import { expect } from 'chai';
import { request, type Reply, type RequestOptions } from '../support/http.js';
import { OpenApiDescription } from '../support/openapi-check.js';
import { serverForSuite } from '../support/server.js';
import { sha256Hex, uniqueName, type Json } from './queue-api.js';

/**
 * docs/openapi.yaml against a real server: every operation it describes is called, for its
 * success and for each refusal it lists, and every answer must be one the description gives
 * (test/support/openapi-check.ts). The other black-box suites check their own answers the same
 * way through `request()`; this one makes sure that no operation and no listed status is left
 * out, so the description cannot keep a route or an answer the server no longer has.
 */

const HOST = 'openapi.example.com';
const ITEM = '0123456789abcdef';
/** Larger than the server's --max-body below. */
const TOO_LARGE = JSON.stringify({ pad: 'x'.repeat(5000) });

/**
 * What no request here can bring about, by operation and status (`* 503` for every operation):
 * a store or disk that refuses to write. test/store/disk-full.test.ts makes those happen, and
 * its answers go through the same check.
 */
const NOT_HERE: Record<string, string> = {
  '* 503': 'a store that cannot make a change durable, or a task history that cannot be brought up to date',
  'PUT /api/v2/def 500': 'a definition the disk refuses to write',
};

describe('docs/openapi.yaml describes what a real server answers (black box)', () => {
  const server = serverForSuite({ args: ['--max-body', '4096', '--log-max-bytes', '4000', '--stats-interval', '100'] });

  it('every operation of the description answers each status it lists, success and refusals, with an answer the description gives (interface §4, §5, §7; decisions §3–§5)', async () => {
    // An instance of its own: what it has seen is this test's alone.
    const description = OpenApiDescription.load();
    const call = async (method: string, path: string, expected: number, options: RequestOptions = {}): Promise<Reply> => {
      const reply = await request(server.url, path, { ...options, method, unchecked: true });
      const problem = description.mismatch({ method, target: path, status: reply.status, headers: reply.headers, body: reply.body });
      if (problem) expect.fail(problem);
      expect(reply.status, `${method} ${path}: ${reply.text.slice(0, 300)}`).to.equal(expected);
      return reply;
    };
    const master = { token: server.masterToken };
    const onQueue = { host: HOST };
    const json = (reply: Reply): Json => reply.json as Json;

    // Management: definitions in, the manifest, the version.
    const q = uniqueName('oa');
    const def = (path: string): string => `/api/v2/def?path=${encodeURIComponent(path)}`;
    await call('PUT', def(`${HOST}/svc-queues/${q}.json`), 200, { ...master, body: JSON.stringify({ access: { post: 'public', fetch: 'public', work: ['alice'] }, 'svc-queue-archivePayloads': true }) });
    await call('PUT', def(`${HOST}/svc-users/alice.json`), 200, { ...master, body: JSON.stringify({ 'svc-user-name': 'alice', tokenSha256: sha256Hex('alice-token') }) });
    await call('PUT', def(`${HOST}/svc-queues/gone.json`), 200, { ...master, body: '{}' });
    await call('PUT', def(`${HOST}/svc-queues/../x.json`), 400, { ...master, body: '{}' });
    await call('PUT', def(`${HOST}/svc-queues/bad.json`), 400, { ...master, body: '{"leaseSeconds": 0}' });
    await call('PUT', def(`${HOST}/svc-queues/big.json`), 413, { ...master, body: TOO_LARGE });
    await call('PUT', def(`${HOST}/svc-queues/zipped.json`), 415, { ...master, body: '{}', headers: { 'content-encoding': 'gzip' } });
    await call('PUT', def(`${HOST}/svc-queues/${q}.json`), 404, { token: 'not-the-master-token', body: '{}' });
    await call('DELETE', def(`${HOST}/svc-queues/gone.json`), 200, master);
    expect(json(await call('DELETE', def(`${HOST}/svc-queues/gone.json`), 200, master))).to.deep.equal({ deleted: false });
    await call('DELETE', def('gone.json'), 400, master);
    await call('DELETE', def(`${HOST}/svc-queues/${q}.json`), 404);
    expect(json(await call('GET', '/api/v2/manifest', 200, master))).to.have.property(`${HOST}/svc-queues/${q}.json`);
    await call('GET', '/api/v2/manifest', 404);
    expect(json(await call('GET', '/api/version', 200, master))).to.deep.equal({ api: 2 });
    await call('GET', '/api/version', 404);

    // Producers.
    const alice = { ...onQueue, token: 'alice-token' };
    const first = json(await call('POST', `/${q}`, 200, { ...onQueue, body: '{"n":1}', headers: { 'idempotency-key': 'one' } }));
    expect(json(await call('POST', `/${q}`, 200, { ...onQueue, body: '{"n":1}', headers: { 'idempotency-key': 'one' } })).id).to.equal(first.id);
    await call('POST', `/${q}`, 400, { ...onQueue, body: '[1]' });
    await call('POST', `/${q}`, 413, { ...onQueue, body: TOO_LARGE });
    await call('POST', `/${q}`, 404, { ...onQueue, token: 'nobody-holds-this', body: '{}' });
    const batch = json(await call('POST', `/${q}/batch`, 200, { ...onQueue, body: '[{"n":2},{"n":3},4]' }));
    expect((batch.items as Json[]).map((e) => e.ok)).to.deep.equal([true, true, false]);
    await call('POST', `/${q}/batch`, 400, { ...onQueue, body: '{"n":2}' });
    await call('POST', `/${uniqueName('none')}/batch`, 404, { ...onQueue, body: '[{}]' });
    await call('GET', `/${q}/items/${first.id as string}?wait=0`, 200, onQueue);
    await call('GET', `/${q}/items/${first.id as string}?wait=31`, 400, onQueue);
    expect(json(await call('GET', `/${q}/items/${ITEM}`, 404, onQueue))).to.deep.equal({ ok: false, error: 'no such item' });

    // Workers: a claim of one, of several with a hand-in, of nothing; then each submission.
    const one = json(await call('POST', `/${q}/claim`, 200, { ...alice, body: '{"worker":"w1"}' }));
    expect(one.id).to.equal(first.id);
    const many = json(await call('POST', `/${q}/claim`, 200, { ...alice, body: JSON.stringify({ worker: 'w2', max: 5, done: [{ id: one.id, result: { output: 'one' } }, { id: ITEM, error: {} }] }) }));
    expect(many.items).to.have.length(2);
    expect(json(await call('POST', `/${q}/claim`, 200, { ...alice, body: '' }))).to.deep.equal({ ok: true, empty: true });
    await call('POST', `/${q}/claim`, 400, { ...alice, body: '{"wait":31}' });
    await call('POST', `/${q}/claim`, 413, { ...alice, body: TOO_LARGE });
    await call('POST', `/${q}/claim`, 404, { ...onQueue, body: '{}' });
    const [second, third] = (many.items as Json[]).map((c) => c.id as string) as [string, string];
    for (const [kind, id] of [['progress', second], ['result', second], ['error', third]] as const) {
      await call('POST', `/${q}/items/${id}/${kind}`, 200, { ...alice, body: '{"percent":50}' });
      await call('POST', `/${q}/items/${id}/${kind}`, 400, { ...alice, body: '"fifty"' });
      await call('POST', `/${q}/items/${id}/${kind}`, 413, { ...alice, body: TOO_LARGE });
      await call('POST', `/${q}/items/${ITEM}/${kind}`, 404, { ...alice, body: '{}' });
    }
    // A release of an item no longer leased is answered, and changes nothing (decisions §8.2).
    expect(json(await call('POST', `/${q}/items/${third}/release?delay=5`, 200, alice))).to.deep.equal({ ok: true, accepted: false, status: 'pending' });
    await call('POST', `/${q}/items/${third}/release?delay=-1`, 400, alice);
    await call('POST', `/${q}/items/${third}/error?retryIn=5&final=true`, 400, { ...alice, body: '{}' });
    await call('POST', `/${q}/items/${third}/release`, 413, { ...alice, body: TOO_LARGE });
    await call('POST', `/${q}/items/${ITEM}/release`, 404, alice);
    expect(json(await call('POST', `/${q}/items/${third}/cancel`, 200, onQueue))).to.include({ accepted: true, status: 'cancelled' });
    await call('POST', `/${q}/items/${third}/cancel`, 400, { ...onQueue, body: Buffer.from([0xff, 0xfe]) });
    await call('POST', `/${q}/items/${third}/cancel`, 413, { ...onQueue, body: TOO_LARGE });
    await call('POST', `/${q}/items/${ITEM}/cancel`, 404, onQueue);
    for (const path of [`/${q}`, `/${q}/batch`, `/${q}/claim`, `/${q}/items/${ITEM}`, ...['progress', 'result', 'error', 'release', 'cancel'].map((k) => `/${q}/items/${ITEM}/${k}`)]) {
      await call('OPTIONS', path, 204, { ...onQueue, headers: { 'access-control-request-method': 'POST', origin: 'https://example.org' } });
    }

    // Tools. The sampler writes every 100 ms; the access log rotates past 4000 bytes.
    let stats: Json[] = [];
    let rotated: Json[] = [];
    while (stats.length === 0 || rotated.length === 0) {
      stats = (json(await call('GET', '/api/v2/stats', 200, master)).files as Json[]).filter((f) => (f.size as number) > 0);
      rotated = json(await call('GET', '/api/v2/logs', 200, master)).rotated as Json[];
    }
    await call('GET', '/api/v2/logs/file?which=active', 200, master);
    await call('GET', `/api/v2/logs/file?which=${rotated[0]!.ts as number}`, 200, master);
    // A rotated file, not the active one: that may have just been rotated, and be empty.
    await call('GET', `/api/v2/logs/file?which=${rotated[0]!.ts as number}`, 206, { ...master, headers: { range: 'bytes=1-' } });
    await call('GET', '/api/v2/logs/file?which=latest', 400, master);
    await call('GET', `/api/v2/stats/file?name=${stats[0]!.name as string}`, 200, master);
    await call('GET', `/api/v2/stats/file?name=${stats[0]!.name as string}`, 206, { ...master, headers: { range: 'bytes=1-' } });
    await call('GET', '/api/v2/stats/file?name=cpu-2000-01-01.log', 200, master);
    await call('GET', '/api/v2/stats/file?name=../cpu.log', 400, master);
    await call('GET', '/api/v2/stats/now', 200, master);
    const tasks = json(await call('GET', '/api/v2/tasks', 200, master)).files as Json[];
    await call('GET', `/api/v2/tasks/file?name=${tasks[0]!.name as string}`, 200, master);
    await call('GET', `/api/v2/tasks/file?name=${tasks[0]!.name as string}`, 206, { ...master, headers: { range: 'bytes=1-' } });
    await call('GET', '/api/v2/tasks/file?name=tasks.log', 400, master);
    const payload = `/api/v2/tasks/payload?host=${HOST}&queue=${q}&id=${first.id as string}`;
    expect((await call('GET', `${payload}&kind=item`, 200, master)).text).to.equal('{"n":1}');
    await call('GET', `${payload}&kind=everything`, 400, master);
    for (const path of ['/api/v2/logs', '/api/v2/logs/file?which=active', '/api/v2/stats', '/api/v2/stats/file?name=cpu-2000-01-01.log', '/api/v2/stats/now', '/api/v2/tasks', `/api/v2/tasks/file?name=${tasks[0]!.name as string}`, `${payload}&kind=item`]) {
      await call('GET', path, 404, { token: 'not-the-master-token' });
    }

    // Operators.
    expect((json(await call('GET', '/api/v2/queues', 200, master)).queues as Json[]).map((e) => e.name)).to.include(q);
    await call('GET', `/api/v2/queues/${HOST}/${q}`, 200, master);
    expect(json(await call('GET', `/api/v2/queues/${HOST}/gone`, 404, master))).to.deep.equal({ error: 'no such queue' });
    await call('GET', '/api/v2/queues/%ZZ/gone', 400, master);
    expect((await call('GET', '/api/v2/metrics', 200, master)).text).to.include('svcq_items_posted_total');
    for (const path of ['/api/v2/queues', `/api/v2/queues/${HOST}/${q}`, '/api/v2/metrics']) await call('GET', path, 404);
    for (const [action, paused] of [['pause', true], ['resume', false]] as const) {
      expect(json(await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 200, master))).to.deep.equal({ paused });
      expect(json(await call('POST', `/api/v2/queues/${HOST}/gone/${action}`, 404, master))).to.deep.equal({ error: 'no such queue' });
      await call('POST', `/api/v2/queues/%ZZ/gone/${action}`, 400, master);
      await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 404);
    }
    // decisions §8.6 bulk actions: the body is checked before anything changes. (Their 200s need
    // the stores' bulk batches.)
    for (const [action, field] of [['redrive', 'moved'], ['retry', 'retried'], ['cancel', 'cancelled']] as const) {
      expect(Object.keys(json(await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 200, { ...master, body: '{"max":1}' })))).to.deep.equal([field, 'more']);
      expect(json(await call('POST', `/api/v2/queues/${HOST}/gone/${action}`, 404, { ...master, body: '{}' }))).to.deep.equal({ error: 'no such queue' });
      await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 400, { ...master, body: '{"max":0}' });
      await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 413, { ...master, body: JSON.stringify({ max: 1, pad: 'x'.repeat(17 * 1024) }) });
      await call('POST', `/api/v2/queues/${HOST}/${q}/${action}`, 404, { body: '{}' });
    }

    // Past the routes: the wall, another API version, a preflight under /api/.
    await call('GET', '/api/v2/nothing', 404, master);
    await call('POST', '/api/v2/manifest', 404, { ...master, body: '{}' });
    await call('HEAD', `/${q}/items/${first.id as string}`, 404, onQueue);
    await call('GET', `/${q}/items`, 404, onQueue);
    await call('GET', '/api/v1/manifest', 426, master);
    await call('OPTIONS', '/api/v2/manifest', 404, { headers: { 'access-control-request-method': 'GET', origin: 'https://example.org' } });

    // A batch past 16 MiB is refused on its declared length, before its body is sent.
    const refused = await rawExchange(server.port, `POST /${q}/batch HTTP/1.1\r\nhost: ${HOST}\r\ncontent-type: application/json\r\ncontent-length: ${16 * 1024 * 1024 + 1}\r\n\r\n[`);
    const problem = description.mismatch({ method: 'POST', target: `/${q}/batch`, ...refused });
    if (problem) expect.fail(problem);
    expect(refused.status).to.equal(413);

    // Every operation, every status it lists: answered here, or named in NOT_HERE.
    const missing: string[] = [];
    for (const operation of description.operations()) {
      const [method, template] = operation.split(' ') as [string, string];
      const listed = Object.keys((description.at(`/paths/${template.replace(/\//g, '~1')}/${method.toLowerCase()}/responses`) ?? {}) as Json);
      for (const status of listed) {
        if (description.seen.has(`${operation} ${status}`) || NOT_HERE[`${operation} ${status}`] || NOT_HERE[`* ${status}`]) continue;
        missing.push(`${operation} ${status}`);
      }
    }
    expect(missing, 'listed in docs/openapi.yaml but never answered here').to.deep.equal([]);
    for (const fallback of ['Wall 404', 'OtherVersion 426']) expect(description.seen.has(fallback), fallback).to.equal(true);
  });
});

/** Sends a request as raw text and reads the answer's head and body (by its content-length), then hangs up. */
function rawExchange(port: number, text: string): Promise<{ status: number; headers: Record<string, string>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text));
    let got = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      got = Buffer.concat([got, chunk]);
      const end = got.indexOf('\r\n\r\n');
      if (end === -1) return;
      const [statusLine, ...lines] = got.subarray(0, end).toString('latin1').split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) headers[line.slice(0, line.indexOf(':')).toLowerCase()] = line.slice(line.indexOf(':') + 1).trim();
      const length = Number(headers['content-length'] ?? 0);
      if (got.length < end + 4 + length) return;
      socket.destroy();
      resolve({ status: Number(statusLine!.split(' ')[1]), headers, body: got.subarray(end + 4, end + 4 + length) });
    });
    socket.on('error', reject);
  });
}
