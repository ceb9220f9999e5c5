import { expect } from 'chai';
import { stableHeaders, type Reply } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { defineQueue, defineUser, deleteDef, newQueue, QueueApi, uniqueName, type Json } from './queue-api.js';

const HOST = 'acc.example.com';
const OTHER_HOST = 'other.example.org';
const WALL = '{"error":"not found"}';

const ALICE = 'alice-token-0001';
const BOB = 'bob-token-0002';
/** carol exists only on OTHER_HOST. */
const CAROL = 'carol-token-0003';
/** A user named alice on OTHER_HOST, with her own token. */
const ALICE_ELSEWHERE = 'alice-elsewhere-token-0004';

function expectWall(reply: Reply, what: string): void {
  expect(reply.status, what).to.equal(404);
  expect(reply.text, what).to.equal(WALL);
}

describe('queue access policy over HTTP', function () {
  this.timeout(20_000);
  let server: TestServer;
  before(async () => {
    server = await startServer();
    await defineUser(server, HOST, 'alice', ALICE);
    await defineUser(server, HOST, 'bob', BOB);
    await defineUser(server, OTHER_HOST, 'carol', CAROL);
    await defineUser(server, OTHER_HOST, 'alice', ALICE_ELSEWHERE);
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  /** post public, fetch and work for alice (and carol, who is not a user of this host). */
  async function mixedQueue(): Promise<QueueApi> {
    return newQueue(server, HOST, { access: { post: 'public', fetch: ['alice', 'carol'], work: ['alice', 'carol'] } });
  }

  it('lets anyone use a "public" operation without a token (interface §5.1, decisions §2.2)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 });
    expect((await q.fetchRaw(id, '', { token: ALICE })).json).to.include({ postedBy: 'public' });
  });

  it('lets a listed user of the host fetch and work (interface §5.1, decisions §2.3)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 }, { token: ALICE });
    const fetched = await q.fetchRaw(id, '', { token: ALICE });
    expect(fetched.status).to.equal(200);
    expect(fetched.json).to.include({ postedBy: 'alice', status: 'pending' });
    const claim = await q.claimRaw({}, { token: ALICE });
    expect(claim.json).to.include({ id });
    const result = await q.submitRaw(id, 'result', { ok: 1 }, { token: ALICE });
    expect(result.json).to.deep.equal({ ok: true, accepted: true, status: 'finished' });
  });

  it('lets a known user of the host use a public operation as themself (decisions §4)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 }, { token: BOB });
    expect((await q.fetchRaw(id, '', { token: ALICE })).json).to.include({ postedBy: 'bob' });
  });

  it('walls another user of the same host from operations that list only others (interface §5.3, decisions §2.2)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 });
    expectWall(await q.fetchRaw(id, '', { token: BOB }), 'fetch');
    expectWall(await q.claimRaw({}, { token: BOB }), 'claim');
    expectWall(await q.submitRaw(id, 'result', { x: 1 }, { token: BOB }), 'result');
    expectWall(await q.submitRaw(id, 'progress', { x: 1 }, { token: BOB }), 'progress');
    expectWall(await q.submitRaw(id, 'error', { x: 1 }, { token: BOB }), 'error');
    expect((await q.fetchRaw(id, '', { token: ALICE })).json).to.include({ status: 'pending', attempts: 0 });
  });

  it('walls a user of another host, even one listed by name or sharing a listed name (decisions §2.3)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 });
    for (const token of [CAROL, ALICE_ELSEWHERE]) {
      expectWall(await q.fetchRaw(id, '', { token }), `fetch ${token}`);
      expectWall(await q.claimRaw({}, { token }), `claim ${token}`);
      // On this host the token is unknown, so even the public post is walled (decisions §4).
      expectWall(await q.postRaw({ n: 2 }, { token }), `post ${token}`);
    }
    expect((await q.fetchRaw(id, '', { token: ALICE })).json).to.include({ status: 'pending', attempts: 0 });
  });

  it('walls a request without a token where the operation is not public (interface §5.3)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 });
    expectWall(await q.fetchRaw(id), 'fetch');
    expectWall(await q.claimRaw({}), 'claim');
    expectWall(await q.submitRaw(id, 'result', { x: 1 }), 'result');
  });

  it('walls a present but unknown token even on a public operation (decisions §4)', async () => {
    const q = await newQueue(server, HOST);
    const id = await q.post({ n: 1 });
    for (const token of ['no-such-token', `${ALICE}x`]) {
      expectWall(await q.postRaw({ n: 2 }, { token }), `post ${token}`);
      expectWall(await q.fetchRaw(id, '', { token }), `fetch ${token}`);
      expectWall(await q.claimRaw({}, { token }), `claim ${token}`);
    }
    expectWall(await q.postRaw({ n: 2 }, { headers: { authorization: 'Basic YWxpY2U6eA==' } }), 'malformed authorization');
    expect((await q.claim()).id).to.equal(id);
    expect(await q.claim()).to.deep.equal({ ok: true, empty: true });
  });

  it('takes the Bearer scheme in any case, as RFC 9110 §11.1 has it, on the queue domain and under /api (interface §5.1, §5.2)', async () => {
    const q = await newQueue(server, HOST, { access: { post: ['alice'], fetch: ['alice'] } });
    for (const scheme of ['bearer', 'BEARER', 'BeArEr']) {
      const posted = await q.postRaw({ scheme }, { headers: { authorization: `${scheme} ${ALICE}` } });
      expect(posted.status, `${scheme}: ${posted.text}`).to.equal(200);
      expect((await q.fetchRaw((posted.json as Json).id as string, '', { headers: { authorization: `${scheme} ${ALICE}` } })).json).to.include({ postedBy: 'alice' });
      const version = await q.raw('GET', '/api/version', undefined, { headers: { authorization: `${scheme} ${server.masterToken}` } });
      expect(version.json, scheme).to.deep.equal({ api: 2 });
    }
  });

  it('walls a credential with whitespace inside, even when its whole text is a user\'s token: a bearer token has none (RFC 6750 §2.1, decisions §4)', async () => {
    const spaced = uniqueName('spaced');
    // A user whose tokenSha256 is that of a text with a space: no request can present it.
    await defineUser(server, HOST, spaced, 'two words');
    const q = await newQueue(server, HOST, { access: { post: [spaced], fetch: [spaced], work: [spaced] } });
    expectWall(await q.postRaw({ n: 1 }, { headers: { authorization: 'Bearer two words' } }), 'Bearer two words');
    expectWall(await q.raw('GET', '/api/version', undefined, { headers: { authorization: `Bearer ${server.masterToken} ${server.masterToken}` } }), 'master token twice');
  });

  it('allows an operation the access object does not list to nobody (decisions §2.2)', async () => {
    const q = await newQueue(server, HOST, { access: { post: 'public' } });
    const id = await q.post({ n: 1 });
    for (const token of [undefined, ALICE]) {
      expectWall(await q.fetchRaw(id, '', { token }), `fetch ${String(token)}`);
      expectWall(await q.claimRaw({}, { token }), `claim ${String(token)}`);
    }
    const none = await newQueue(server, HOST, { access: {} });
    expectWall(await none.postRaw({ n: 1 }), 'post with access {}');
  });

  it('answers every denial with the same wall, byte for byte, as an unknown queue or host (interface §5.3, decisions §4)', async () => {
    const q = await mixedQueue();
    const id = await q.post({ n: 1 });
    const denied = await q.fetchRaw(id, '', { token: BOB });
    const samples = [
      denied,
      await q.fetchRaw(id),
      await q.claimRaw({}, { token: 'unknown' }),
      await new QueueApi(server, HOST, uniqueName('absent')).fetchRaw(id),
      await q.fetchRaw(id, '', { host: 'nowhere.example.net' }),
      await q.raw('GET', `/${q.name}/nothing-here`),
      await q.raw('DELETE', `/${q.name}/items/${id}`),
    ];
    for (const [i, reply] of samples.entries()) {
      expectWall(reply, `sample ${i}`);
      expect(reply.headers['content-type'], `sample ${i}`).to.equal('application/json; charset=utf-8');
      expect(reply.headers['x-powered-by'], `sample ${i}`).to.equal(undefined);
      expect(stableHeaders(reply), `sample ${i}`).to.deep.equal(stableHeaders(denied));
    }
  });

  it('hides a queue whose definition is deleted, and shows its items again when it is put back (decisions §2.4)', async () => {
    const name = uniqueName();
    const def = { access: { post: 'public', fetch: 'public', work: 'public' } };
    await defineQueue(server, HOST, name, def);
    const q = new QueueApi(server, HOST, name);
    const id = await q.post({ n: 1 });
    const before = await q.fetch(id);
    await deleteDef(server, `${HOST}/svc-queues/${name}.json`);
    expectWall(await q.fetchRaw(id), 'fetch after delete');
    expectWall(await q.postRaw({ n: 2 }), 'post after delete');
    expectWall(await q.claimRaw({}), 'claim after delete');
    await defineQueue(server, HOST, name, def);
    expect(await q.fetch(id)).to.deep.equal(before);
    expect(await q.claim()).to.include({ id, attempts: 1 });
  });

  it('applies a PUT that changes access or a token on the next request (decisions §2.4)', async () => {
    const name = uniqueName();
    await defineQueue(server, HOST, name, { access: { post: 'public', fetch: 'public', work: ['alice'] } });
    const q = new QueueApi(server, HOST, name);
    const id = await q.post({ n: 1 });
    expectWall(await q.claimRaw({}, { token: BOB }), 'bob before the change');

    await defineQueue(server, HOST, name, { access: { post: 'public', fetch: 'public', work: ['bob'] } });
    expectWall(await q.claimRaw({}, { token: ALICE }), 'alice after the change');
    expect((await q.claimRaw({}, { token: BOB })).json).to.include({ id });

    await defineQueue(server, HOST, name, { access: { fetch: 'public', work: ['bob'] } });
    expectWall(await q.postRaw({ n: 2 }), 'post after it was withdrawn');

    const dave = uniqueName('dave');
    await defineUser(server, HOST, dave, 'dave-token-old');
    await defineQueue(server, HOST, name, { access: { post: [dave], fetch: 'public' } });
    await q.post({ n: 3 }, { token: 'dave-token-old' });
    await defineUser(server, HOST, dave, 'dave-token-new');
    expectWall(await q.postRaw({ n: 4 }, { token: 'dave-token-old' }), 'old token after the user changed');
    const posted = await q.postRaw({ n: 5 }, { token: 'dave-token-new' });
    expect(posted.status).to.equal(200);
    expect((await q.fetch((posted.json as Json).id as string)).postedBy).to.equal(dave);
  });
});
