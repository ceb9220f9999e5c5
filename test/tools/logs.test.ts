import { expect } from 'chai';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer, serverForSuite } from '../support/server.js';
import { eventually, expectBadRequest, expectEmpty200, expectIntegers, putQueue, tools } from './helpers.js';

interface LogList {
  active: { size: number } | null;
  rotated: Array<{ ts: number; size: number }>;
}

async function logList(server: TestServer): Promise<LogList> {
  const reply = await tools(server, 'logs');
  expect(reply.status).to.equal(200);
  return reply.json as LogList;
}

/** Waits until the active log holds a line whose path is `marker`, and returns every line. */
async function linesUntil(server: TestServer, marker: string): Promise<Array<Record<string, unknown>>> {
  return eventually(`an access line for ${marker}`, async () => {
    const reply = await tools(server, 'logs/file?which=active');
    const lines = reply.text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
    return lines.some((l) => l.path === marker) ? lines : undefined;
  });
}

describe('access log and /api/v2/logs (interface §4.6, decisions §5)', () => {
  const server = serverForSuite();

  it('writes one access line per request with ts, method, host, path, status, ms, bytes and ip (decisions §5)', async () => {
    await request(server.url, '/shape-check', { host: 'jobs.shape.test' });
    const lines = await linesUntil(server, '/shape-check');
    const line = lines.find((l) => l.path === '/shape-check')!;
    expect(Object.keys(line).sort()).to.deep.equal(['bytes', 'host', 'ip', 'method', 'ms', 'path', 'status', 'ts']);
    expect(line).to.include({ method: 'GET', host: 'jobs.shape.test', status: 404 });
    expectIntegers(line, ['ts', 'status', 'bytes'], 'line');
    expect(line.ms).to.be.a('number').at.least(0);
    expect(line.ip).to.be.a('string').and.not.equal('');
    expect(line.bytes).to.be.above(0);
  });

  it('counts in bytes what went out for this request alone, also the third on one keep-alive connection (decisions §5)', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const base = new URL(server.url);
    const get = (marker: string): Promise<void> =>
      new Promise((resolve, reject) => {
        http.get({ hostname: base.hostname, port: base.port, path: marker, agent, headers: { host: 'jobs.bytes.test' } }, (res) => res.resume().on('end', resolve)).on('error', reject);
      });
    try {
      for (const n of [1, 2, 3]) await get(`/bytes-${n}`);
    } finally {
      agent.destroy();
    }
    const lines = await linesUntil(server, '/bytes-3');
    // Three walls, byte for byte the same but for the time in Date: each line counts one of them.
    const bytes = [1, 2, 3].map((n) => lines.find((l) => l.path === `/bytes-${n}`)!.bytes as number);
    expect(bytes[1]).to.equal(bytes[0]);
    expect(bytes[2]).to.equal(bytes[0]);
  });

  it('writes one line for a request whose client went away before the answer, a long-poll claim given up on: status 499, once (decisions §5: one line per request)', async function () {
    this.timeout(15_000);
    await putQueue(server, 'jobs.abandon.test', 'empty', { access: { post: 'public', fetch: 'public', work: 'public' } });
    await new Promise<void>((resolve) => {
      const req = http.request(`${server.url}/empty/claim`, { method: 'POST', headers: { host: 'jobs.abandon.test', 'content-type': 'application/json' } });
      req.on('error', () => resolve());
      req.end('{"worker":"gives-up","wait":2}');
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 300);
    });
    const lines = await linesUntil(server, '/empty/claim');
    expect(lines.filter((l) => l.path === '/empty/claim')).to.have.length(1);
    expect(lines.find((l) => l.path === '/empty/claim')).to.include({ method: 'POST', host: 'jobs.abandon.test', status: 499 });
    // Once the wait the claim asked for is over, there is still one line.
    await new Promise((resolve) => setTimeout(resolve, 2200));
    await request(server.url, '/abandon-marker', { host: 'jobs.abandon.test' });
    expect((await linesUntil(server, '/abandon-marker')).filter((l) => l.path === '/empty/claim')).to.have.length(1);
  });

  it('never writes a token or a query string into an access line (decisions §5)', async () => {
    await request(server.url, '/api/v2/logs?secret=query-value-1', { token: server.masterToken });
    await request(server.url, '/privacy-queue/items/0123456789abcdef?wait=0&token=query-value-2', { host: 'jobs.privacy.test', token: 'user-token-value-3' });
    const lines = await linesUntil(server, '/privacy-queue/items/0123456789abcdef');
    expect(lines.some((l) => l.path === '/api/v2/logs')).to.equal(true);
    const text = JSON.stringify(lines);
    for (const secret of [server.masterToken, 'query-value-1', 'query-value-2', 'user-token-value-3', 'Bearer']) expect(text).not.to.include(secret);
    for (const line of lines) expect(line.path).not.to.include('?');
  });

  it('lists the active log as { size } and the rotated ones as [{ ts, size }] (interface §4.6)', async () => {
    await request(server.url, '/list-check', { host: 'jobs.list.test' });
    await linesUntil(server, '/list-check');
    const list = await logList(server);
    expect(Object.keys(list).sort()).to.deep.equal(['active', 'rotated']);
    expect(list.active).to.be.an('object');
    expectIntegers(list.active!, ['size'], 'active');
    expect(list.active!.size).to.be.above(0);
    expect(list.rotated).to.deep.equal([]);
  });

  it('streams the active log as application/octet-stream with accept-ranges: bytes (interface §4.6)', async () => {
    const reply = await tools(server, 'logs/file?which=active');
    expect(reply.status).to.equal(200);
    expect(reply.headers['content-type']).to.equal('application/octet-stream');
    expect(reply.headers['accept-ranges']).to.equal('bytes');
    expect(reply.headers['content-range']).to.equal(undefined);
    expect(Number(reply.headers['content-length'])).to.equal(reply.body.length);
    expect(reply.text.endsWith('\n')).to.equal(true);
  });

  it('answers Range: bytes=N- with 206, content-range bytes N-LAST/SIZE and the bytes from N (decisions §5)', async () => {
    const full = await tools(server, 'logs/file?which=active');
    const from = 10;
    const part = await tools(server, 'logs/file?which=active', { range: `bytes=${from}-` });
    expect(part.status).to.equal(206);
    const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(String(part.headers['content-range']));
    expect(m, String(part.headers['content-range'])).to.not.equal(null);
    const [, start, last, size] = m!.map(Number) as [number, number, number, number];
    expect(start).to.equal(from);
    expect(last).to.equal(size - 1);
    expect(part.body.length).to.equal(size - from);
    expect(part.headers['accept-ranges']).to.equal('bytes');
    // The log grows with every request, this one included: what the first read saw is a prefix.
    expect(part.body.subarray(0, full.body.length - from).equals(full.body.subarray(from))).to.equal(true);
  });

  it('answers a Range at or past the end with an empty 200 (interface §4.6)', async () => {
    const full = await tools(server, 'logs/file?which=active');
    expectEmpty200(await tools(server, 'logs/file?which=active', { range: 'bytes=999999999-' }), 'far past the end');
    const size = (await logList(server)).active!.size;
    expect(size).to.be.at.least(full.body.length);
    const atEnd = await tools(server, 'logs/file?which=active', { range: `bytes=${size + 4096}-` });
    expectEmpty200(atEnd, 'past the end');
  });

  it('ignores any Range form other than bytes=N- and sends the whole file with 200 (decisions §5)', async () => {
    for (const range of ['bytes=0-10', 'bytes=-5', 'bytes=5-10,20-', 'items=0-', 'bytes=x-', 'bytes = 5-']) {
      const reply = await tools(server, 'logs/file?which=active', { range });
      expect(reply.status, range).to.equal(200);
      expect(reply.headers['content-range'], range).to.equal(undefined);
      expect(reply.body.length, range).to.be.above(20);
      expect(reply.text.startsWith('{"ts":'), range).to.equal(true);
    }
  });

  it('answers a well-formed which that names no file with an empty 200 (decisions §5)', async () => {
    expectEmpty200(await tools(server, 'logs/file?which=1234567890123'), 'unknown ts');
    expectEmpty200(await tools(server, 'logs/file?which=1234567890123', { range: 'bytes=0-' }), 'unknown ts with Range');
  });

  it('rejects a malformed which with 400 { error }, traversal attempts included (decisions §5)', async () => {
    const bad = ['', '..%2Faccess.log', '%2e%2e', '../access.log', '%2Fetc%2Fpasswd', '/etc/passwd', 'access.log', 'Active', '12ab', '-1', '1.5', '12345678901234567890'];
    for (const which of bad) expectBadRequest(await tools(server, `logs/file?which=${which}`), `which=${which}`);
    expectBadRequest(await tools(server, 'logs/file'), 'no which');
    expectBadRequest(await tools(server, 'logs/file?which=active&which=active'), 'which twice');
  });

  it('puts the tools endpoints behind the wall without the master token (interface §5)', async () => {
    for (const endpoint of ['logs', 'logs/file?which=active', 'stats', 'stats/now', 'tasks', 'tasks/file?name=tasks-2026-01-01.log']) {
      const reply = await request(server.url, `/api/v2/${endpoint}`, { token: 'wrong-token' });
      expect(reply.status, endpoint).to.equal(404);
      expect(reply.json, endpoint).to.deep.equal({ error: 'not found' });
    }
  });

  it('answers only the exact GET routes: another spelling or method gets the wall (decisions §4)', async () => {
    for (const [method, endpoint] of [['GET', 'logs/'], ['GET', 'LOGS'], ['GET', 'stats/now/'], ['PUT', 'logs'], ['DELETE', 'tasks'], ['POST', 'stats/now']]) {
      const reply = await request(server.url, `/api/v2/${endpoint}`, { method, token: server.masterToken });
      expect(reply.status, `${method} ${endpoint}`).to.equal(404);
      expect(reply.json, `${method} ${endpoint}`).to.deep.equal({ error: 'not found' });
    }
  });

  it('writes the last lines to disk when the server shuts down (decisions §1.1)', async () => {
    const other = await startServer();
    try {
      await request(other.url, '/last-words', { host: 'jobs.shutdown.test' });
      expect(await other.stop()).to.equal(0);
      const text = readFileSync(path.join(other.root, '_svcq/logs/access.log'), 'utf8');
      expect(text).to.include('"path":"/last-words"');
    } finally {
      cleanupTemp(other.root);
    }
  });
});

describe('access log rotation (decisions §5)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer({ args: ['--log-max-bytes', '2000', '--log-keep', '3'] });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  it('rotates past --log-max-bytes into files with unique ts = mtime, listed oldest first, keeping the newest --log-keep', async () => {
    // About 130 bytes a line: 100 requests make several rotations, more than are kept.
    for (let i = 0; i < 100; i++) await request(server.url, `/rotate-${i}`, { host: 'jobs.rotate.test' });
    // The list requests are logged too and may rotate once more: a list is taken when the files
    // on disk, read right after it, are the ones it lists (no rotation in between).
    const logs = path.join(server.root, '_svcq/logs');
    const list = await eventually('three rotated files, listed as they are on disk', async () => {
      const l = await logList(server);
      const onDisk = readdirSync(logs).filter((n) => n !== 'access.log').sort();
      return l.rotated.length === 3 && JSON.stringify(onDisk) === JSON.stringify(l.rotated.map((r) => `access-${r.ts}.log`).sort()) ? l : undefined;
    });
    const ts = list.rotated.map((r) => r.ts);
    expect(ts).to.deep.equal([...ts].sort((a, b) => a - b));
    expect(new Set(ts).size).to.equal(3);
    for (const r of list.rotated) {
      expectIntegers(r, ['ts', 'size'], 'rotated');
      expect(r.size).to.be.above(2000);
    }
    // Read from the newest: the reads below are logged too, and a rotation they cause removes
    // only the oldest file (six lines of about 130 bytes cannot rotate twice).
    const texts: string[] = [];
    for (const r of [...list.rotated].reverse()) {
      const file = path.join(logs, `access-${r.ts}.log`);
      const reply = await tools(server, `logs/file?which=${r.ts}`);
      if (r === list.rotated[0] && !existsSync(file)) break;
      expect(Math.round(statSync(file).mtimeMs)).to.equal(r.ts);
      expect(reply.status).to.equal(200);
      expect(reply.body.length).to.equal(r.size);
      expect(reply.text.split('\n').filter(Boolean).every((l) => JSON.parse(l) as unknown)).to.equal(true);
      texts.push(reply.text);
    }
    // The newest requests are in the files that were kept, the oldest were dropped with their file.
    expect(texts.join('')).not.to.include('"path":"/rotate-0"');
    const later = await tools(server, `logs/file?which=${ts[2]}`, { range: 'bytes=5-' });
    expect(later.status).to.equal(206);
  });
});
