import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { expect } from 'chai';
import { request, type Reply } from '../support/http.js';
import { cleanupTemp, filesUnderRootOnly, startServer, serverForSuite } from '../support/server.js';
import { uniqueName } from './queue-api.js';

/** Management endpoints (interface §4.5, §7; decisions §2): manifest, PUT and DELETE of one definition. */

const sha256 = (bytes: string | Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** Every file below `root`, relative, except the server's own `_svcq` folder. */
function definitionFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const rel = path.relative(root, path.join(dir, entry.name));
      if (rel === '_svcq') continue;
      if (entry.isDirectory()) walk(path.join(dir, entry.name));
      else out.push(rel);
    }
  };
  walk(root);
  return out.sort();
}

describe('management API: manifest, PUT and DELETE /api/v2/def (black box)', () => {
  const server = serverForSuite();

  /** `rawPath` goes into the query string as it is: the test controls every byte of the encoding. */
  const put = (rawPath: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<Reply> =>
    request(server.url, `/api/v2/def?path=${rawPath}`, { method: 'PUT', token: server.masterToken, body, headers });
  const del = (rawPath: string): Promise<Reply> => request(server.url, `/api/v2/def?path=${rawPath}`, { method: 'DELETE', token: server.masterToken });
  const manifest = async (): Promise<Record<string, string>> => {
    const reply = await request(server.url, '/api/v2/manifest', { token: server.masterToken });
    expect(reply.status).to.equal(200);
    return reply.json as Record<string, string>;
  };
  const userBody = (name: string): string => JSON.stringify({ 'svc-user-name': name, tokenSha256: sha256(`${name}-token`) });

  describe('path validation (interface §4.5 rule 1, decisions §2.1)', () => {
    // [what, raw query value, a fragment the error must contain]
    const bad: Array<[string, string, string]> = [
      ['.. as the host', '../svc-queues/a.json', '".." is not a valid host'],
      ['.. after the folder', 'v.example.com/svc-queues/../a.json', 'is not <host>/svc-queues'],
      ['a deep traversal', 'v.example.com/svc-queues/../../../etc/passwd.json', 'is not <host>/svc-queues'],
      ['%2e%2e as the host', '%2e%2e/svc-queues/a.json', '".." is not a valid host'],
      ['%2e%2e as the name', 'v.example.com/svc-queues/%2e%2e.json', '".." is not a valid name'],
      ['%2F in place of every slash with ..', '..%2F..%2Fsvc-queues%2Fa.json', 'is not <host>/svc-queues'],
      ['%2f inside the name', 'v.example.com/svc-queues/a%2fb.json', 'is not <host>/svc-queues'],
      ['double-encoded %252e%252e%252f', 'v.example.com/svc-queues/%252e%252e%252fa.json', '"%2e%2e%2fa" is not a valid name'],
      ['double-encoded slashes', 'v.example.com%252Fsvc-queues%252Fa.json', 'is not <host>/svc-queues'],
      ['an absolute path', '/v.example.com/svc-queues/a.json', 'is not <host>/svc-queues'],
      ['an absolute system path', '/etc/svc-queues/a.json', 'is not <host>/svc-queues'],
      ['a backslash path', 'v.example.com%5Csvc-queues%5Ca.json', 'is not <host>/svc-queues'],
      ['another folder', 'v.example.com/svc-items/a.json', 'is not <host>/svc-queues'],
      ["the server's own folder as host", '_svcq/svc-queues/a.json', '"_svcq" is not a valid host'],
      ['another folder one level up', 'v.example.com/a.json', 'is not <host>/svc-queues'],
      ['another ending (.txt)', 'v.example.com/svc-queues/a.txt', 'is not <host>/svc-queues'],
      ['another ending (.json.bak)', 'v.example.com/svc-queues/a.json.bak', 'is not <host>/svc-queues'],
      ['an uppercase ending', 'v.example.com/svc-queues/a.JSON', 'is not <host>/svc-queues'],
      ['no ending', 'v.example.com/svc-users/a', 'is not <host>/svc-queues'],
      ['a doubled slash', 'v.example.com//svc-queues/a.json', 'is not <host>/svc-queues'],
      ['a doubled slash before the file', 'v.example.com/svc-queues//a.json', 'is not <host>/svc-queues'],
      ['a trailing slash', 'v.example.com/svc-queues/a.json/', 'is not <host>/svc-queues'],
      ['an uppercase host', 'V.Example.com/svc-queues/a.json', '"V.Example.com" is not a valid host'],
      ['a host with a port', 'v.example.com:8080/svc-queues/a.json', 'is not a valid host'],
      ['a host with a trailing dot', 'v.example.com./svc-queues/a.json', 'is not a valid host'],
      ['a host label starting with -', '-v.example.com/svc-queues/a.json', 'is not a valid host'],
      ['an uppercase name', 'v.example.com/svc-queues/Jobs.json', '"Jobs" is not a valid name'],
      ['a name starting with -', 'v.example.com/svc-queues/-a.json', '"-a" is not a valid name'],
      ['a name starting with _', 'v.example.com/svc-users/_a.json', '"_a" is not a valid name'],
      ['a name with a dot', 'v.example.com/svc-queues/a.b.json', '"a.b" is not a valid name'],
      ['a name with a space', 'v.example.com/svc-queues/a%20b.json', '"a b" is not a valid name'],
      ['a name with a NUL byte', 'v.example.com/svc-queues/a%00.json', 'is not a valid name'],
      ['a name of 65 characters', `v.example.com/svc-queues/${'a'.repeat(65)}.json`, 'is not a valid name'],
      ['an empty name', 'v.example.com/svc-queues/.json', '"" is not a valid name'],
      ['the reserved queue name api', 'v.example.com/svc-queues/api.json', '"api" is reserved'],
      ['the reserved user name public', 'v.example.com/svc-users/public.json', '"public" is reserved'],
      ['an empty path', '', 'path is required'],
      ['a repeated path=', 'v.example.com/svc-queues/a.json&path=v.example.com/svc-queues/b.json', 'more than once'],
    ];

    for (const [what, raw, fragment] of bad) {
      it(`rejects ${what} with 400 { error } naming the problem, for PUT and DELETE`, async () => {
        for (const reply of [await put(raw, '{}'), await del(raw)]) {
          expect(reply.status, reply.text).to.equal(400);
          expect(Object.keys(reply.json as object)).to.deep.equal(['error']);
          expect((reply.json as { error: string }).error).to.include(fragment);
        }
      });
    }

    it('rejects a PUT and a DELETE without any path= with 400', async () => {
      for (const method of ['PUT', 'DELETE']) {
        const reply = await request(server.url, '/api/v2/def', { method, token: server.masterToken, body: method === 'PUT' ? '{}' : undefined });
        expect(reply.status).to.equal(400);
        expect((reply.json as { error: string }).error).to.include('path is required');
      }
    });

    it('has written nothing on disk and nothing in the manifest for any rejected path (interface §4.5 rule 2)', async () => {
      // Runs after every rejection above: not one of them left a file or a manifest entry.
      expect(definitionFiles(server.root).filter((f) => f.startsWith('v.example.com') || !f.includes('/svc-'))).to.deep.equal([]);
      expect(existsSync(path.join(server.root, '..', 'svc-queues'))).to.equal(false);
      expect(Object.keys(await manifest()).filter((p) => p.startsWith('v.example.com'))).to.deep.equal([]);
    });
  });

  describe('stored bytes and hashes (interface §4.5 rules 3 and 5, decisions §7)', () => {
    it('stores the exact bytes sent, unusual whitespace included, and the manifest hash is their sha256 in lowercase hex', async function () {
      filesUnderRootOnly(this, 'it reads the definition file under the root; there definitions are rows of svcq_definitions (exact bytes: test/definitions/pg-definitions.test.ts)');
      const name = uniqueName('bytes');
      const body = Buffer.from('\r\n\t{ "leaseSeconds" :\t30 ,\r\n  "description": "caf\\u00e9 ☕ \u00e9"  ,"retainFrom":"fetched"}\n\n \t', 'utf8');
      const reply = await put(`h.example.com/svc-queues/${name}.json`, body, { 'content-type': 'text/plain' });
      expect(reply.status, reply.text).to.equal(200);
      expect(reply.json).to.deep.equal({ ok: true });
      const stored = readFileSync(path.join(server.root, 'h.example.com', 'svc-queues', `${name}.json`));
      expect(stored.equals(body)).to.equal(true);
      const hash = (await manifest())[`h.example.com/svc-queues/${name}.json`];
      expect(hash).to.equal(sha256(body));
      expect(hash).to.match(/^[0-9a-f]{64}$/);
    });

    it('gives identical content identical hashes, and different bytes of equal JSON different hashes', async () => {
      const [a, b, c] = [uniqueName('same'), uniqueName('same'), uniqueName('same')];
      await put(`h.example.com/svc-queues/${a}.json`, '{"leaseSeconds":5}');
      await put(`h.example.com/svc-queues/${b}.json`, '{"leaseSeconds":5}');
      await put(`h.example.com/svc-queues/${c}.json`, '{"leaseSeconds": 5}');
      const m = await manifest();
      expect(m[`h.example.com/svc-queues/${a}.json`]).to.equal(m[`h.example.com/svc-queues/${b}.json`]);
      expect(m[`h.example.com/svc-queues/${a}.json`]).to.not.equal(m[`h.example.com/svc-queues/${c}.json`]);
    });

    it('replaces an existing definition on PUT: new bytes on disk, new hash, old hash gone', async function () {
      filesUnderRootOnly(this, 'it reads the definition file under the root');
      const name = uniqueName('replace');
      const at = `h.example.com/svc-queues/${name}.json`;
      expect((await put(at, '{"leaseSeconds":5}')).status).to.equal(200);
      expect((await put(at, '{"leaseSeconds":6}\n')).status).to.equal(200);
      expect(readFileSync(path.join(server.root, at), 'utf8')).to.equal('{"leaseSeconds":6}\n');
      expect((await manifest())[at]).to.equal(sha256('{"leaseSeconds":6}\n'));
      expect(readdirSync(path.join(server.root, 'h.example.com', 'svc-queues')).filter((f) => f.endsWith('.tmp'))).to.deep.equal([]);
    });

    it('keeps the old definition whole when a replacement is rejected', async function () {
      filesUnderRootOnly(this, 'it reads the definition file under the root');
      const name = uniqueName('keep');
      const at = `h.example.com/svc-queues/${name}.json`;
      await put(at, '{"leaseSeconds":5}');
      expect((await put(at, '{"leaseSeconds":0}')).status).to.equal(400);
      expect(readFileSync(path.join(server.root, at), 'utf8')).to.equal('{"leaseSeconds":5}');
      expect((await manifest())[at]).to.equal(sha256('{"leaseSeconds":5}'));
    });

    it('lists queue and user definitions of every host in the manifest under their server-relative paths (interface §4.5)', async () => {
      const [q, u] = [uniqueName('mq'), uniqueName('mu')];
      await put(`m1.example.com/svc-queues/${q}.json`, '{}');
      await put(`10.0.0.7/svc-users/${u}.json`, userBody(u));
      const m = await manifest();
      expect(m).to.include.keys(`m1.example.com/svc-queues/${q}.json`, `10.0.0.7/svc-users/${u}.json`);
      for (const [key, value] of Object.entries(m)) {
        expect(key).to.match(/^[a-z0-9.-]+\/svc-(queues|users)\/[a-z0-9][a-z0-9_-]*\.json$/);
        expect(value).to.match(/^[0-9a-f]{64}$/);
      }
    });
  });

  describe('DELETE (interface §4.5 rule 4)', () => {
    it('answers { deleted: true } then { deleted: false }, removes the file and the manifest entry', async () => {
      const name = uniqueName('del');
      const at = `h.example.com/svc-users/${name}.json`;
      expect((await put(at, userBody(name))).status).to.equal(200);
      const first = await del(at);
      expect(first.status).to.equal(200);
      expect(first.json).to.deep.equal({ deleted: true });
      expect(existsSync(path.join(server.root, at))).to.equal(false);
      expect(await manifest()).to.not.have.property(at);
      const second = await del(at);
      expect(second.status).to.equal(200);
      expect(second.json).to.deep.equal({ deleted: false });
    });

    it('answers { deleted: false } for a path that never existed, on a host that never existed', async () => {
      const reply = await del(`never.example.com/svc-queues/${uniqueName('never')}.json`);
      expect(reply.status).to.equal(200);
      expect(reply.json).to.deep.equal({ deleted: false });
    });
  });

  describe('definition validation (interface §4.5 rule 2, §7; decisions §2.2, §2.3)', () => {
    // [what, folder, body, fragments the error must contain]
    const invalid: Array<[string, 'svc-queues' | 'svc-users', (name: string) => string | Buffer, string[]]> = [
      ['a user whose svc-user-name differs from the file name', 'svc-users', () => userBody('someone-else'), ['svc-user-name', '"someone-else"', 'file name']],
      ['a user without tokenSha256', 'svc-users', (n) => JSON.stringify({ 'svc-user-name': n }), ['missing field "tokenSha256"']],
      ['a user with a tokenSha256 that is not 64 lowercase hex', 'svc-users', (n) => JSON.stringify({ 'svc-user-name': n, tokenSha256: 'A'.repeat(64) }), ['tokenSha256', '64 lowercase hexadecimal']],
      ['a user with an unknown field', 'svc-users', (n) => JSON.stringify({ 'svc-user-name': n, tokenSha256: sha256(n), password: 'x' }), ['unknown field "password"']],
      ['a queue with an unknown field', 'svc-queues', () => '{"leaseSeconds":5,"leaseSecs":6}', ['unknown field "leaseSecs"']],
      ['a queue with an unknown access operation', 'svc-queues', () => '{"access":{"delete":"public"}}', ['unknown field "delete"', 'access']],
      ['a queue whose schema does not compile', 'svc-queues', () => '{"schema":{"type":"no-such-type"}}', ['schema does not compile']],
      ['a queue whose schema has an unresolvable $ref', 'svc-queues', () => '{"schema":{"$ref":"https://example.com/missing.json"}}', ['schema does not compile']],
      ['leaseSeconds out of range', 'svc-queues', () => '{"leaseSeconds":0}', ['leaseSeconds', '1 to 86400']],
      ['maxAttempts not an integer', 'svc-queues', () => '{"maxAttempts":1.5}', ['maxAttempts', 'integer']],
      ['retainFrom not one of the two values', 'svc-queues', () => '{"retainFrom":"posted"}', ['retainFrom', '"finished" or "fetched"']],
      ['svc-queue-archivePayloads not a boolean', 'svc-queues', () => '{"svc-queue-archivePayloads":"yes"}', ['svc-queue-archivePayloads', 'true or false']],
      ['timeoutSeconds zero', 'svc-queues', () => '{"timeoutSeconds":0}', ['timeoutSeconds']],
      ['access naming a user that breaks the name rule', 'svc-queues', () => '{"access":{"post":["Alice"]}}', ['access.post', 'user names']],
      ['access listing the reserved user public', 'svc-queues', () => '{"access":{"work":["public"]}}', ['access.work', 'reserved']],
      ['a body that is not JSON', 'svc-queues', () => '{leaseSeconds: 5}', ['not valid JSON']],
      ['an empty body', 'svc-queues', () => '', ['not valid JSON']],
      ['a JSON array', 'svc-queues', () => '[]', ['must be a JSON object']],
      ['JSON null', 'svc-users', () => 'null', ['must be a JSON object']],
      // Latin-1 é: read as UTF-8 it would be stored as one thing and read as another (RFC 8259 §8.1).
      ['bytes that are not UTF-8', 'svc-queues', () => Buffer.from('{"leaseSeconds":30,"schema":{"type":"object","description":"caf\xe9"}}', 'latin1'), ['not UTF-8']],
    ];

    for (const [what, folder, body, fragments] of invalid) {
      it(`rejects ${what} with 400 { error } naming the file and the problem, writing nothing`, async () => {
        const name = uniqueName('bad');
        const at = `h.example.com/${folder}/${name}.json`;
        const reply = await put(at, body(name));
        expect(reply.status, reply.text).to.equal(400);
        const error = (reply.json as { error: string }).error;
        expect(error.startsWith(`${at}: `), error).to.equal(true);
        for (const fragment of fragments) expect(error).to.include(fragment);
        expect(error).to.not.include('\n');
        expect(error).to.not.match(/\(\/.*:\d+:\d+\)/);
        expect(existsSync(path.join(server.root, at))).to.equal(false);
        expect(await manifest()).to.not.have.property(at);
      });
    }

    it('reports every problem of a definition with several, in one 400 message naming the file (interface §7)', async () => {
      const at = `h.example.com/svc-queues/${uniqueName('many')}.json`;
      const reply = await put(at, '{"leaseSeconds":0,"maxAttempts":"3","leaseSecs":1,"timeoutSeconds":0,"access":{"work":["public"]}}');
      expect(reply.status, reply.text).to.equal(400);
      expect(Object.keys(reply.json as object)).to.deep.equal(['error']);
      const error = (reply.json as { error: string }).error;
      expect(error.startsWith(`${at}: `), error).to.equal(true);
      for (const fragment of ['leaseSeconds must be', 'maxAttempts must be', 'unknown field "leaseSecs"', 'timeoutSeconds must be', 'access.work names the reserved user']) expect(error).to.include(fragment);
      // One sentence per field: a failed oneOf is not reported once per branch.
      expect(error.split('timeoutSeconds must be')).to.have.length(2);
      expect(error).to.not.include('\n');
      expect(existsSync(path.join(server.root, at))).to.equal(false);
    });

    it('reports every problem of a user definition: a bad tokenSha256 and a svc-user-name that differs from the file name', async () => {
      const at = `h.example.com/svc-users/${uniqueName('many')}.json`;
      const reply = await put(at, JSON.stringify({ 'svc-user-name': 'someone-else', tokenSha256: 'nope' }));
      expect(reply.status, reply.text).to.equal(400);
      const error = (reply.json as { error: string }).error;
      expect(error).to.include('tokenSha256 must be');
      expect(error).to.include('svc-user-name "someone-else" must equal the file name');
    });

    it('accepts every field of decisions §2.2 at once', async () => {
      const body = {
        leaseSeconds: 86400,
        maxAttempts: 1000,
        retryDelaySeconds: 0,
        timeoutSeconds: null,
        retainFrom: 'fetched',
        retainSeconds: 0,
        'svc-queue-archivePayloads': true,
        access: { post: 'public', fetch: ['alice', 'bob'], work: [] },
        schema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } },
        description: 'all fields',
      };
      const reply = await put(`h.example.com/svc-queues/${uniqueName('full')}.json`, JSON.stringify(body));
      expect(reply.status, reply.text).to.equal(200);
    });

    it('makes a PUT take effect for the next request and a replacement change it (decisions §2.4)', async () => {
      const name = uniqueName('live');
      const at = `live.example.com/svc-queues/${name}.json`;
      await put(at, '{"access":{"post":"public"}}');
      const posted = await request(server.url, `/${name}`, { method: 'POST', host: 'live.example.com', body: '{"n":1}' });
      expect(posted.status, posted.text).to.equal(200);
      await put(at, '{"access":{}}');
      const walled = await request(server.url, `/${name}`, { method: 'POST', host: 'live.example.com', body: '{"n":1}' });
      expect(walled.status).to.equal(404);
      expect(walled.text).to.equal('{"error":"not found"}');
    });
  });

  describe('write failures (interface §4.5, §7)', () => {
    it('answers a failed write with 500 { error }, leaving nothing half-written and the manifest unchanged (interface §4.5, §7)', async function () {
      filesUnderRootOnly(this, 'it makes the definitions folder unwritable; there definitions are written to the database');
      // A plain file where the host folder should be: the server cannot create <host>/svc-queues.
      writeFileSync(path.join(server.root, 'blocked.example.com'), 'not a folder');
      const at = `blocked.example.com/svc-queues/${uniqueName('fail')}.json`;
      const reply = await put(at, '{}');
      expect(reply.status).to.equal(500);
      expect(reply.json).to.deep.equal({ error: `${at}: the server could not write the definition file` });
      expect(reply.text).to.not.match(/\n|ENOTDIR|EEXIST|\.js:\d+/);
      expect(await manifest()).to.not.have.property(at);
      expect(readFileSync(path.join(server.root, 'blocked.example.com'), 'utf8')).to.equal('not a folder');
    });
  });

  it('refuses a compressed PUT body with 415 instead of storing other bytes than were sent, or failing with a 500', async () => {
    const at = `gzip.example.com/svc-queues/${uniqueName('gz')}.json`;
    for (const body of [Buffer.from('not gzip at all'), gzipSync('{"leaseSeconds": 5}')]) {
      const reply = await request(server.url, `/api/v2/def?path=${encodeURIComponent(at)}`, { method: 'PUT', token: server.masterToken, body, headers: { 'content-encoding': 'gzip' } });
      expect(reply.status).to.equal(415);
      expect(reply.json).to.have.property('error').that.is.a('string');
    }
    expect(await manifest()).to.not.have.property(at);
  });

  it('refuses a PUT body larger than --max-body (1 MiB unless set) with 413 { error }, writing nothing (interface §4.5 rule 2; --max-body is the largest request body)', async () => {
    const at = `big.example.com/svc-queues/${uniqueName('big')}.json`;
    const reply = await put(encodeURIComponent(at), JSON.stringify({ description: 'x'.repeat(1024 * 1024) }));
    expect(reply.status).to.equal(413);
    expect(reply.json).to.have.property('error').that.is.a('string');
    expect(await manifest()).to.not.have.property(at);
  });

  it('ignores a request body on GET /api/v2/manifest and answers the same object (interface §4.5 rule 6)', async () => {
    const plain = await manifest();
    const withBody = await request(server.url, '/api/v2/manifest', { token: server.masterToken, body: '{"x":1}' });
    expect(withBody.status).to.equal(200);
    expect(withBody.json).to.deep.equal(plain);
  });
});

describe('stored definitions across a restart (decisions §1.1, §6)', () => {
  it('serves the same manifest and the same queues after a restart on the same root', async () => {
    const first = await startServer();
    const root = first.root;
    try {
      const name = uniqueName('restart');
      const body = ' {"access":{"post":"public"}} ';
      const reply = await request(first.url, `/api/v2/def?path=r.example.com%2Fsvc-queues%2F${name}.json`, { method: 'PUT', token: first.masterToken, body });
      expect(reply.status).to.equal(200);
      const before = (await request(first.url, '/api/v2/manifest', { token: first.masterToken })).json;
      expect(await first.stop()).to.equal(0);

      const second = await startServer({ root });
      try {
        const after = (await request(second.url, '/api/v2/manifest', { token: second.masterToken })).json;
        expect(after).to.deep.equal(before);
        expect((after as Record<string, string>)[`r.example.com/svc-queues/${name}.json`]).to.equal(sha256(body));
        const posted = await request(second.url, `/${name}`, { method: 'POST', host: 'r.example.com', body: '{}' });
        expect(posted.status, posted.text).to.equal(200);
      } finally {
        await second.stop();
      }
    } finally {
      cleanupTemp(root);
    }
  });
});
