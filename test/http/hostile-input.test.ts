import { expect } from 'chai';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS, putDef } from '../http/queue-api.js';
import { runCli } from '../support/cli.js';

const HOST = 'deep.example.com';

/** `{"a":{"a":…1…}}` nested `depth` levels. */
function nestedObject(depth: number): string {
  return `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
}

describe('valid JSON never gives a 500 (decisions §3.3, §3.5, interface §4.6)', function () {
  this.timeout(30_000);
  const server = serverForSuite();
  const call = (method: string, path: string, body?: string) => request(server.url, path, { method, host: HOST, body });

  before(async () => {
    await defineQueue(server, HOST, 'plain', { access: PUBLIC_ACCESS });
    // A recursive schema: every value of the item is an object of the same shape, at any depth.
    await defineQueue(server, HOST, 'recursive', {
      access: PUBLIC_ACCESS,
      schema: { $ref: '#/$defs/n', $defs: { n: { type: 'object', additionalProperties: { $ref: '#/$defs/n' } } } },
    });
  });

  it('claim criteria nested 20,000 deep get a 400 with a sentence, not a 500 (decisions §3.3)', async () => {
    const reply = await call('POST', '/plain/claim', `{"criteria":{"a":${nestedObject(20_000)}}}`);
    expect(reply.status, reply.text).to.equal(400);
    expect(reply.json).to.have.property('ok', false);
    expect((reply.json as { errors: Array<{ message: string }> }).errors[0]!.message).to.match(/deeper than \d+ levels/);
    // And the queue still serves.
    expect((await call('POST', '/plain/claim', '{}')).json).to.deep.equal({ ok: true, empty: true });
  });

  it('criteria a few levels deep still work as before (decisions §3.3)', async () => {
    const posted = await call('POST', '/plain', '{"tag":{"x":[1,2,{"y":"z"}]}}');
    expect(posted.status).to.equal(200);
    const claim = await call('POST', '/plain/claim', '{"criteria":{"tag":{"eq":{"x":[1,2,{"y":"z"}]}}}}');
    expect((claim.json as { id: string }).id).to.equal((posted.json as { id: string }).id);
  });

  it('an item nested 100,000 deep on a queue with a recursive schema gets a 400 with a sentence (decisions §3.5)', async () => {
    const reply = await call('POST', '/recursive', nestedObject(100_000).replace(/1(?=})/, '{}'));
    expect(reply.status, reply.text.slice(0, 200)).to.equal(400);
    expect((reply.json as { errors: Array<{ message: string }> }).errors[0]!.message).to.match(/nests deeper than/);
    // A shallow item that fits the schema is accepted, and one that does not is refused by the schema.
    expect((await call('POST', '/recursive', '{"a":{"b":{}}}')).status).to.equal(200);
    expect((await call('POST', '/recursive', '{"a":{"b":1}}')).status).to.equal(400);
  });

  it('on a queue with a schema, an item with a key given twice or a number past a double is refused naming the field; without a schema it is kept as sent (decisions §3.5)', async () => {
    await defineQueue(server, HOST, 'typed', { access: PUBLIC_ACCESS, schema: { properties: { n: { type: 'integer' } } } });
    for (const [body, path] of [
      ['{"n":1e400}', '/n'],
      ['{"n":"str","n":5}', '/n'],
      ['{"m":{"k":1,"k":2},"n":1}', '/m/k'],
    ] as const) {
      const reply = await call('POST', '/typed', body);
      expect(reply.status, `${body}: ${reply.text}`).to.equal(400);
      expect((reply.json as { errors: Array<{ path: string }> }).errors[0]!.path).to.equal(path);
    }
    // In a batch, that item alone is refused.
    const batch = await call('POST', '/typed/batch', '[{"n":1},{"n":2,"n":"x"},{"n":3}]');
    expect(batch.status).to.equal(200);
    expect((batch.json as { items: Array<{ ok: boolean }> }).items.map((i) => i.ok)).to.deep.equal([true, false, true]);
    // Numbers a double holds, written any way, still pass.
    expect((await call('POST', '/typed', '{"n":1e2}')).status).to.equal(200);
    // No schema: nothing to vouch for, and the item is kept byte for byte.
    await defineQueue(server, HOST, 'untyped', { access: PUBLIC_ACCESS });
    expect((await call('POST', '/untyped', '{"n":"str","n":1e400}')).status).to.equal(200);
    expect((await call('POST', '/untyped/claim', '{}')).text).to.include('"item":{"n":"str","n":1e400}');
  });

  it('an item nested 100,000 deep on a queue without a schema is stored and handed out as posted (decisions §3.5)', async () => {
    await defineQueue(server, HOST, 'anything', { access: PUBLIC_ACCESS });
    const body = nestedObject(100_000);
    const posted = await call('POST', '/anything', body);
    expect(posted.status).to.equal(200);
    const claim = await call('POST', '/anything/claim', '{"criteria":{"a":{"ne":1}}}');
    expect(claim.status).to.equal(200);
    expect(claim.text).to.include(body);
  });

  it('svcq work hands an item nested 100,000 deep to the command as posted, and its output back as the result, with no stack trace (interface §2.1, decisions §1.3)', async () => {
    await defineQueue(server, HOST, 'deepwork', { access: PUBLIC_ACCESS, maxAttempts: 1 });
    const body = nestedObject(100_000);
    const posted = await call('POST', '/deepwork', body);
    const id = (posted.json as { id: string }).id;
    const run = await runCli(['work', 'deepwork', '--exec', 'cat', '--once', '--url', server.url, '--host', HOST]);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stderr + run.stdout).to.not.match(/RangeError|\n\s+at /);
    const record = await call('GET', `/deepwork/items/${id}`);
    expect(record.text).to.include(`"status":"finished"`);
    expect(record.text).to.include(`"result":${body}`);
  });

  it('a PUT of a queue whose schema nests 20,000 deep gets a 400, not a 500 (interface §4.5)', async () => {
    const reply = await request(server.url, `/api/v2/def?path=${encodeURIComponent(`${HOST}/svc-queues/deep.json`)}`, {
      method: 'PUT',
      token: server.masterToken,
      body: `{"schema":${'{"properties":{"a":'.repeat(20_000)}{}${'}}'.repeat(20_000)}}`,
    });
    expect(reply.status, reply.text.slice(0, 200)).to.equal(400);
    expect(reply.json).to.have.property('error');
  });

  it('Range: bytes=N- with 16 or more digits is past the end: an empty 200, not the whole file (interface §4.6)', async () => {
    await putDef(server, `${HOST}/svc-queues/touch.json`, { access: PUBLIC_ACCESS });
    for (const n of ['9999999999999999', '99999999999999999999999']) {
      const reply = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken, headers: { range: `bytes=${n}-` } });
      expect(reply.status, n).to.equal(200);
      expect(reply.body.length, n).to.equal(0);
    }
    const whole = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken, headers: { range: 'bytes=0-' } });
    expect(whole.status).to.equal(206);
    expect(whole.body.length).to.be.greaterThan(0);
  });
});
