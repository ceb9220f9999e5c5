import { readdirSync } from 'node:fs';
import { expect } from 'chai';
import { request, stableHeaders, type Reply, type RequestOptions } from '../support/http.js';
import { cleanupTemp, filesUnderRootOnly, startServer, type TestServer } from '../support/server.js';
import { defineQueue, defineUser, uniqueName } from './queue-api.js';

/**
 * The wall (interface §5.3, §7; decisions §4): every denied or unknown request, on every route and
 * host, gets one byte-identical 404. Plus CORS, the preflight, versioning (interface §9).
 */
describe('the wall, CORS and versioning (black box)', () => {
  let server: TestServer;
  const host = 'wall.example.com';
  const otherHost = 'other-wall.example.com';
  const queue = uniqueName('walled');
  const open = uniqueName('open');
  const alice = 'alice-token-0123456789';
  const bob = 'bob-token-0123456789';
  const carol = 'carol-token-0123456789';
  let wall: Reply;

  before(async () => {
    server = await startServer();
    await defineUser(server, host, 'alice', alice);
    await defineUser(server, host, 'bob', bob);
    await defineUser(server, otherHost, 'carol', carol);
    // alice may post and fetch; nobody may work; bob is a user of the host but not on the list.
    await defineQueue(server, host, queue, { access: { post: ['alice'], fetch: ['alice'] } });
    await defineQueue(server, otherHost, queue, { access: { post: ['carol'], fetch: ['carol'], work: ['carol'] } });
    await defineQueue(server, host, open, { access: { post: 'public', fetch: 'public', work: 'public' } });
    wall = await request(server.url, '/api/v2/manifest');
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  const master = (): string => server.masterToken;
  const q = (path: string, options: RequestOptions = {}): RequestOptions & { path: string } => ({ path, host, ...options });

  /** Each of these is denied or unknown; each must be indistinguishable from the others. */
  const denied: Array<[string, () => RequestOptions & { path: string }]> = [
    ['missing token on /api', () => ({ path: '/api/v2/manifest' })],
    ['wrong token on /api', () => ({ path: '/api/v2/manifest', token: 'not-the-master-token' })],
    ['a user token on /api', () => ({ path: '/api/v2/manifest', token: alice })],
    ['an unknown /api route with the master token', () => ({ path: '/api/v2/nothing-here', token: master() })],
    ['an unlisted method on a listed path (POST /api/v2/manifest)', () => ({ path: '/api/v2/manifest', method: 'POST', token: master() })],
    ['PATCH /api/v2/def with the master token', () => ({ path: '/api/v2/def?path=wall.example.com/svc-queues/x.json', method: 'PATCH', token: master(), body: '{}' })],
    ['OPTIONS preflight under /api with the master token', () => ({ path: '/api/v2/manifest', method: 'OPTIONS', token: master(), headers: { origin: 'https://a.example', 'access-control-request-method': 'GET' } })],
    ['OPTIONS under /api without a token', () => ({ path: '/api/v2/def', method: 'OPTIONS', headers: { origin: 'https://a.example', 'access-control-request-method': 'PUT' } })],
    ['/api/v3 without a valid token', () => ({ path: '/api/v3/manifest' })],
    ['/api/v1 with a wrong token', () => ({ path: '/api/v1/manifest', token: 'wrong' })],
    ['GET /api/version without a token', () => ({ path: '/api/version' })],
    ['GET /api/version with a user token', () => ({ path: '/api/version', token: alice })],
    ['bare /api with the master token', () => ({ path: '/api', token: master() })],
    ['a different case of a known route (/api/V2/manifest)', () => ({ path: '/api/V2/manifest', token: master() })],
    ['a trailing slash on a known route', () => ({ path: '/api/v2/manifest/', token: master() })],
    ['PUT /api/v2/def with a wrong token', () => ({ path: '/api/v2/def?path=wall.example.com%2Fsvc-queues%2Fsneaky.json', method: 'PUT', token: 'wrong', body: '{}' })],
    ['DELETE /api/v2/def without a token', () => ({ path: `/api/v2/def?path=wall.example.com%2Fsvc-queues%2F${queue}.json`, method: 'DELETE' })],
    ['a garbage Authorization header (Basic)', () => ({ path: '/api/v2/manifest', headers: { authorization: 'Basic bWFzdGVyOnRva2Vu' } })],
    ['a garbage Authorization header (Bearer with two words)', () => ({ path: '/api/v2/manifest', headers: { authorization: `Bearer ${master()} extra` } })],
    ['a garbage Authorization header on a queue path', () => q(`/${queue}`, { method: 'POST', body: '{}', headers: { authorization: 'Bearer' } })],
    ['an unknown host on the queue domain', () => ({ path: `/${queue}`, method: 'POST', host: 'nowhere.example.com', token: alice, body: '{}' })],
    ['an unknown queue on a known host', () => q('/no-such-queue', { method: 'POST', token: alice, body: '{}' })],
    ['a queue path with a wrong user token', () => q(`/${queue}`, { method: 'POST', token: 'wrong-user-token', body: '{}' })],
    ["another host's user token", () => q(`/${queue}`, { method: 'POST', token: carol, body: '{}' })],
    ['a listed user on an operation nobody is allowed (work)', () => q(`/${queue}/claim`, { method: 'POST', token: alice, body: '{}' })],
    ['a user of the host who is not on the list', () => q(`/${queue}`, { method: 'POST', token: bob, body: '{}' })],
    ['no token on an operation that is not public', () => q(`/${queue}`, { method: 'POST', body: '{}' })],
    ['an unknown token on a public operation (fails closed)', () => q(`/${open}`, { method: 'POST', token: 'unknown-token', body: '{}' })],
    ['the master token on a queue path', () => q(`/${queue}`, { method: 'POST', token: master(), body: '{}' })],
    ['an unknown route on the queue domain', () => q(`/${queue}/items/0123456789abcdef/explode`, { method: 'POST', token: alice, body: '{}' })],
    ['an unlisted method on a queue path (GET /<queue>)', () => q(`/${queue}`, { token: alice })],
    ['fetch by a user without fetch access', () => q(`/${queue}/items/0123456789abcdef`, { token: bob })],
    ['the reserved queue name api on the queue domain', () => q('/api', { method: 'POST', token: alice, body: '{}' })],
  ];

  it('is status 404, content-type application/json; charset=utf-8, body {"error":"not found"} (decisions §4)', () => {
    expect(wall.status).to.equal(404);
    expect(wall.headers['content-type']).to.equal('application/json; charset=utf-8');
    expect(wall.text).to.equal('{"error":"not found"}');
  });

  for (const [what, make] of denied) {
    it(`is byte-identical for ${what} (interface §5.3, decisions §4)`, async () => {
      const { path, ...options } = make();
      const reply = await request(server.url, path, options);
      expect(reply.status, reply.text).to.equal(wall.status);
      expect(stableHeaders(reply)).to.deep.equal(stableHeaders(wall));
      expect(reply.body.equals(wall.body), reply.text).to.equal(true);
    });
  }

  it('answers HEAD under /api with the wall status and headers, since HEAD is not a listed method (decisions §4)', async () => {
    const reply = await request(server.url, '/api/version', { method: 'HEAD', token: server.masterToken });
    expect(reply.status).to.equal(404);
    expect(stableHeaders(reply)).to.deep.equal(stableHeaders(wall));
  });

  it('writes nothing for a PUT behind the wall (interface §5.2)', async function () {
      filesUnderRootOnly(this, 'it lists the definition files under the root');
    await request(server.url, '/api/v2/def?path=wall.example.com%2Fsvc-queues%2Fsneaky.json', { method: 'PUT', token: 'wrong', body: '{}' });
    expect(readdirSync(`${server.root}/${host}/svc-queues`)).to.not.include('sneaky.json');
    const manifest = await request(server.url, '/api/v2/manifest', { token: server.masterToken });
    expect(Object.keys(manifest.json as object)).to.not.include(`${host}/svc-queues/sneaky.json`);
  });

  it('lets a queue hide again after DELETE: the same wall as a queue that never existed (decisions §2.4)', async () => {
    const gone = uniqueName('gone');
    await defineQueue(server, host, gone, { access: { post: ['alice'] } });
    const del = await request(server.url, `/api/v2/def?path=${host}%2Fsvc-queues%2F${gone}.json`, { method: 'DELETE', token: server.masterToken });
    expect(del.json).to.deep.equal({ deleted: true });
    const reply = await request(server.url, `/${gone}`, { method: 'POST', host, token: alice, body: '{}' });
    expect(reply.status).to.equal(404);
    expect(reply.body.equals(wall.body)).to.equal(true);
    expect(stableHeaders(reply)).to.deep.equal(stableHeaders(wall));
  });

  it('answers GET /api/version with { api: 2 } for the master token only (interface §9, decisions §4)', async () => {
    const reply = await request(server.url, '/api/version', { token: server.masterToken });
    expect(reply.status).to.equal(200);
    expect(reply.json).to.deep.equal({ api: 2 });
  });

  for (const version of ['v1', 'v3', 'v10', 'v02']) {
    it(`answers /api/${version}/… with the master token with 426 and the version it speaks (interface §9, decisions §4)`, async () => {
      const reply = await request(server.url, `/api/${version}/manifest`, { token: server.masterToken });
      expect(reply.status).to.equal(426);
      expect(reply.json).to.deep.equal({ error: 'this server speaks /api/v2', api: 2 });
      expect(reply.headers['access-control-allow-origin']).to.equal('*');
    });
  }

  it('answers /api/v<other> with the master token with 426 whatever the method; without it, the wall (interface §7, decisions §4)', async () => {
    const wall = await request(server.url, '/no-such-route-at-all');
    for (const method of ['POST', 'PATCH', 'OPTIONS', 'HEAD', 'GET', 'PUT', 'DELETE']) {
      const reply = await request(server.url, '/api/v3/items', { method, token: server.masterToken, body: method === 'POST' || method === 'PATCH' || method === 'PUT' ? '{}' : undefined });
      expect(reply.status, method).to.equal(426);
      if (method !== 'HEAD') expect(reply.json, method).to.deep.equal({ error: 'this server speaks /api/v2', api: 2 });
      const denied = await request(server.url, '/api/v3/items', { method, body: method === 'POST' || method === 'PATCH' || method === 'PUT' ? '{}' : undefined });
      expect(denied.status, method).to.equal(404);
      if (method !== 'HEAD') expect(denied.body.equals(wall.body), method).to.equal(true);
    }
  });

  it('answers a queue-domain OPTIONS preflight with 204, allow-methods and allow-headers (interface §4.4, decisions §4)', async () => {
    for (const [h, path] of [
      [host, `/${queue}`],
      [host, `/${queue}/items/0123456789abcdef/result`],
      ['nowhere.example.com', '/whatever'],
    ] as const) {
      const reply = await request(server.url, path, {
        method: 'OPTIONS',
        host: h,
        headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
      });
      expect(reply.status, `${h}${path}`).to.equal(204);
      expect(reply.headers['access-control-allow-origin']).to.equal('*');
      const methods = String(reply.headers['access-control-allow-methods']).toUpperCase();
      expect(methods).to.include('GET').and.to.include('POST');
      const allowed = String(reply.headers['access-control-allow-headers'])
        .toLowerCase()
        .split(',')
        .map((s) => s.trim());
      expect(allowed).to.include.members(['authorization', 'content-type', 'idempotency-key', 'range']);
      expect(reply.text).to.equal('');
    }
  });

  it('puts access-control-allow-origin: * and no x-powered-by on every kind of response (interface §4.4, decisions §4)', async () => {
    const user = uniqueName('cors');
    const replies: Reply[] = [
      wall,
      await request(server.url, '/api/version', { token: server.masterToken }),
      await request(server.url, '/api/v2/manifest', { token: server.masterToken }),
      await request(server.url, '/api/v3/manifest', { token: server.masterToken }),
      await request(server.url, '/api/v2/def?path=nope', { method: 'PUT', token: server.masterToken, body: '{}' }),
      await request(server.url, `/api/v2/def?path=${host}%2Fsvc-users%2F${user}.json`, { method: 'PUT', token: server.masterToken, body: '{"svc-user-name":"someone-else","tokenSha256":"00"}' }),
      await request(server.url, `/api/v2/def?path=${host}%2Fsvc-queues%2F${user}.json`, { method: 'DELETE', token: server.masterToken }),
      await request(server.url, `/${open}`, { method: 'POST', host, body: '{"n":1}' }),
      await request(server.url, `/${open}`, { method: 'POST', host, body: 'not json' }),
      await request(server.url, `/${open}/items/0123456789abcdef`, { host }),
      await request(server.url, `/${queue}`, { method: 'OPTIONS', host, headers: { origin: 'https://x.example', 'access-control-request-method': 'POST' } }),
    ];
    expect(new Set(replies.map((r) => r.status))).to.include.members([200, 204, 400, 404, 426]);
    for (const reply of replies) {
      expect(reply.headers['access-control-allow-origin'], `${reply.status} ${reply.text}`).to.equal('*');
      expect(reply.headers).to.not.have.property('x-powered-by');
      expect(reply.text).to.not.match(/<html|<!DOCTYPE|\n\s+at /i);
    }
  });
});
