import { expect } from 'chai';
import { request, type Reply } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { expectBadRequest, expectEmpty200, expectIntegers, putQueue, today, tools } from './helpers.js';

const HOST = 'jobs.history.test';
const PUBLIC = { post: 'public', fetch: 'public', work: 'public' };

interface TaskEvent {
  ts: number;
  host: string;
  queue: string;
  id: string;
  event: string;
  attempts?: number;
  worker?: string;
  status?: string;
}

function queueCall(server: TestServer, path: string, body: string): Promise<Reply> {
  return request(server.url, path, { method: 'POST', host: HOST, body });
}

async function eventsOf(server: TestServer, id: string): Promise<TaskEvent[]> {
  const reply = await tools(server, `tasks/file?name=tasks-${today()}.log`);
  return reply.text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as TaskEvent)
    .filter((e) => e.id === id);
}

describe('task history and payload archive (interface §4.6, §6; decisions §5)', () => {
  let server: TestServer;
  before(async () => {
    server = await startServer();
    await putQueue(server, HOST, 'archived', { access: PUBLIC, 'svc-queue-archivePayloads': true });
    await putQueue(server, HOST, 'plain', { access: PUBLIC });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  it('lists task day-files as { files: [] } before any event (interface §4.6)', async () => {
    const reply = await tools(server, 'tasks');
    expect(reply.status).to.equal(200);
    expect(reply.json).to.deep.equal({ files: [] });
  });

  it('rejects a malformed task file name with 400 { error }, traversal attempts included; a well-formed absent one is an empty 200 (decisions §5)', async () => {
    const day = today();
    for (const name of ['', `..%2Ftasks-${day}.log`, `%2e%2e%2ftasks-${day}.log`, '%2Fetc%2Fpasswd', `tasks-${day}.log%2F..`, `cpu-${day}.log`, 'tasks-2026-1-1.log', `tasks-${day}.txt`, `Tasks-${day}.log`]) {
      expectBadRequest(await tools(server, `tasks/file?name=${name}`), `name=${name}`);
    }
    expectBadRequest(await tools(server, 'tasks/file'), 'no name');
    expectEmpty200(await tools(server, 'tasks/file?name=tasks-1999-01-01.log'), 'old day');
  });

  it('rejects a malformed host, queue, id or kind with 400 { error }, traversal attempts included (decisions §5)', async () => {
    const good = { host: HOST, queue: 'archived', id: '0123456789abcdef', kind: 'item' };
    const bad: Array<[keyof typeof good, string]> = [
      ['host', '..'],
      ['host', '%2e%2e'],
      ['host', `..%2F${HOST}`],
      ['host', '%2Fetc'],
      ['host', 'JOBS.history.test'],
      ['host', '_svcq'],
      ['host', ''],
      ['queue', '..'],
      ['queue', '%2e%2e%2farchived'],
      ['queue', 'archived%2F..%2F..'],
      ['queue', 'Archived'],
      ['queue', 'api'],
      ['id', '0123456789abcde'],
      ['id', '0123456789ABCDEF'],
      ['id', '..%2F..%2F..%2Fetc%2Fpasswd'],
      ['id', '0123456789abcdef.item'],
      ['kind', 'body'],
      ['kind', 'item%2F..'],
      ['kind', 'ITEM'],
    ];
    for (const [field, value] of bad) {
      const query = Object.entries({ ...good, [field]: value })
        .map(([k, v]) => `${k}=${v}`)
        .join('&');
      expectBadRequest(await tools(server, `tasks/payload?${query}`), `${field}=${value}`);
    }
    for (const missing of Object.keys(good)) {
      const query = Object.entries(good)
        .filter(([k]) => k !== missing)
        .map(([k, v]) => `${k}=${v}`)
        .join('&');
      expectBadRequest(await tools(server, `tasks/payload?${query}`), `without ${missing}`);
    }
  });

  it('rejects a host/queue pair with no stored definition with 400 (decisions §5)', async () => {
    expectBadRequest(await tools(server, `tasks/payload?host=${HOST}&queue=nosuchqueue&id=0123456789abcdef&kind=item`), 'unknown queue');
    expectBadRequest(await tools(server, 'tasks/payload?host=other.history.test&queue=archived&id=0123456789abcdef&kind=item'), 'unknown host');
  });

  it('answers a well-formed payload that was never written with an empty 200 (interface §4.6)', async () => {
    expectEmpty200(await tools(server, `tasks/payload?host=${HOST}&queue=archived&id=0123456789abcdef&kind=result`), 'unknown id');
  });

  it('records posted, claimed, progress, finished for a full lifecycle, in order, and archives the exact bytes (decisions §5)', async () => {
    const itemBytes = '{ "n": 1,   "text": "héllo" }';
    const progressBytes = '{"percent":50}';
    const resultBytes = '{ "output": "done" ,"n":2}';
    const posted = await queueCall(server, '/archived', itemBytes);
    expect(posted.status, posted.text).to.equal(200);
    const id = (posted.json as { id: string }).id;
    const claimed = await queueCall(server, '/archived/claim', JSON.stringify({ worker: 'history-worker' }));
    expect((claimed.json as { id: string }).id).to.equal(id);
    expect((await queueCall(server, `/archived/items/${id}/progress`, progressBytes)).json).to.include({ accepted: true });
    expect((await queueCall(server, `/archived/items/${id}/result`, resultBytes)).json).to.include({ accepted: true });

    // Acknowledged transitions have their events on disk already: no waiting needed.
    const events = await eventsOf(server, id);
    expect(events.map((e) => e.event)).to.deep.equal(['posted', 'claimed', 'progress', 'finished']);
    for (const e of events) {
      expect(e).to.include({ host: HOST, queue: 'archived', id });
      expectIntegers(e as unknown as Record<string, unknown>, ['ts'], e.event);
    }
    expect(events.map((e) => e.ts)).to.deep.equal(events.map((e) => e.ts).sort((a, b) => a - b));
    expect(events[1]).to.include({ worker: 'history-worker', attempts: 1 });
    // Each line keeps decisions §5's field order: { ts, host, queue, id, event, attempts?, worker?, status? }.
    expect(Object.keys(events[1]!)).to.deep.equal(['ts', 'host', 'queue', 'id', 'event', 'attempts', 'worker', 'status']);
    expect(Object.keys(events[0]!)).to.deep.equal(['ts', 'host', 'queue', 'id', 'event', 'attempts', 'status']);

    const payload = (kind: string) => tools(server, `tasks/payload?host=${HOST}&queue=archived&id=${id}&kind=${kind}`);
    for (const [kind, bytes] of [['item', itemBytes], ['progress', progressBytes], ['result', resultBytes]] as const) {
      const reply = await payload(kind);
      expect(reply.status, kind).to.equal(200);
      expect(reply.headers['content-type'], kind).to.equal('application/octet-stream');
      expect(reply.body.equals(Buffer.from(bytes)), `${kind}: ${reply.text}`).to.equal(true);
      // Served whole (interface §4.6: 200), so it does not advertise byte ranges it would ignore.
      expect(reply.headers['accept-ranges'], kind).to.equal('none');
    }
    const ranged = await tools(server, `tasks/payload?host=${HOST}&queue=archived&id=${id}&kind=item`, { range: 'bytes=2-' });
    expect(ranged.status, 'a Range header on a payload').to.equal(200);
    expect(ranged.body.equals(Buffer.from(itemBytes)), ranged.text).to.equal(true);
    expectEmpty200(await payload('error'), 'no error was submitted');
    expect((await payload('error')).headers['accept-ranges']).to.equal('none');

    const list = (await tools(server, 'tasks')).json as { files: Array<Record<string, unknown>> };
    expect(list.files).to.deep.equal([{ name: `tasks-${today()}.log`, date: today(), size: list.files[0]!.size }]);
    expectIntegers(list.files[0]!, ['size'], 'tasks file');
  });

  it('archives the latest accepted progress: many progress reports at once leave the archive holding the one the item holds (decisions §5)', async () => {
    for (let n = 0; n < 15; n++) {
      const id = ((await queueCall(server, '/archived', `{"n":${n}}`)).json as { id: string }).id;
      await queueCall(server, '/archived/claim', JSON.stringify({ worker: 'racer' }));
      const replies = await Promise.all(Array.from({ length: 8 }, (_, p) => queueCall(server, `/archived/items/${id}/progress`, `{"percent":${p}}`)));
      for (const reply of replies) expect(reply.status, reply.text).to.equal(200);
      const held = ((await request(server.url, `/archived/items/${id}`, { host: HOST })).json as { progress: unknown }).progress;
      const archived = await tools(server, `tasks/payload?host=${HOST}&queue=archived&id=${id}&kind=progress`);
      expect(JSON.parse(archived.text), `item ${n}: the archive against the item`).to.deep.equal(held);
    }
  });

  it('archives nothing for a queue without svc-queue-archivePayloads, but still records its events (interface §4.6)', async () => {
    const posted = await queueCall(server, '/plain', '{"x":1}');
    const id = (posted.json as { id: string }).id;
    expect((await eventsOf(server, id)).map((e) => e.event)).to.deep.equal(['posted']);
    expectEmpty200(await tools(server, `tasks/payload?host=${HOST}&queue=plain&id=${id}&kind=item`), 'not archived');
  });

  it('serves the task day-file with Range: bytes=N- as 206 (interface §4.6)', async () => {
    const name = `tasks-${today()}.log`;
    const full = await tools(server, `tasks/file?name=${name}`);
    const part = await tools(server, `tasks/file?name=${name}`, { range: 'bytes=1-' });
    expect(part.status).to.equal(206);
    expect(part.headers['content-range']).to.equal(`bytes 1-${full.body.length - 1}/${full.body.length}`);
    expect(part.body.equals(full.body.subarray(1))).to.equal(true);
    expectEmpty200(await tools(server, `tasks/file?name=${name}`, { range: `bytes=${full.body.length}-` }), 'at the end');
  });
});
