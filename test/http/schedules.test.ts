import { expect } from 'chai';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, type TestServer } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS, QueueApi, uniqueName } from './queue-api.js';

/**
 * Schedules (decisions §8.3) as a black box: a definition PUT with a schedule, the items it posts,
 * the one-queue view's next and last, what a PUT refuses, and a restart that posts no occurrence
 * twice and misses none of them.
 */

const HOST = 'schedules.example.com';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface ScheduleView {
  name: string;
  next: number | null;
  last: number | null;
  lastId: string | null;
}

async function schedulesOf(server: TestServer, name: string): Promise<ScheduleView[]> {
  const reply = await request(server.url, `/api/v2/queues/${HOST}/${name}`, { token: server.masterToken });
  expect(reply.status, reply.text).to.equal(200);
  return (reply.json as { schedules: ScheduleView[] }).schedules;
}

/** The `posted` task events that name a schedule, from the task history (every day-file). */
async function scheduledEvents(server: TestServer, name: string): Promise<Array<{ id: string; schedule: string; occurrence: number; ts: number }>> {
  const files = ((await request(server.url, '/api/v2/tasks', { token: server.masterToken })).json as { files: Array<{ name: string }> }).files;
  const out: Array<{ id: string; schedule: string; occurrence: number; ts: number; queue: string; event: string }> = [];
  for (const f of files) {
    const text = (await request(server.url, `/api/v2/tasks/file?name=${f.name}`, { token: server.masterToken })).text;
    for (const line of text.split('\n')) if (line !== '') out.push(JSON.parse(line) as (typeof out)[number]);
  }
  return out.filter((e) => e.queue === name && e.event === 'posted' && e.schedule !== undefined);
}

describe('schedules (decisions §8.3, black box)', function () {
  this.timeout(60_000);
  let server: TestServer;

  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  it('a PUT with a schedule: an item is posted at each occurrence, postedBy schedule:<name>, and GET /api/v2/queues/<host>/<name> shows next and last', async () => {
    const name = uniqueName('sched');
    const q = new QueueApi(server, HOST, name);
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, schedules: { tick: { every: 1, item: { kind: 'tick' }, priority: 3 } } });
    let view: ScheduleView[] = [];
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && ((view = await schedulesOf(server, name))[0]?.lastId ?? null) === null) await sleep(50);
    expect(view).to.have.length(1);
    const { last, lastId, next } = view[0]!;
    expect(lastId).to.be.a('string');
    expect(next! - last!).to.equal(1000);
    const item = await q.fetch(lastId!);
    expect(item).to.deep.include({ status: 'pending', postedBy: 'schedule:tick', priority: 3 });
    // Within 1 s of its time (decisions §8.3).
    expect((item.postedAt as number) - last!).to.be.within(0, 1000);
    const claimed = await q.claim({ worker: 'w' });
    expect(claimed.item).to.deep.equal({ kind: 'tick' });
    // The posted event names the schedule and the occurrence.
    let events: Awaited<ReturnType<typeof scheduledEvents>> = [];
    while (Date.now() < deadline + 5000 && !(events = await scheduledEvents(server, name)).some((e) => e.id === lastId)) await sleep(100);
    expect(events.find((e) => e.id === lastId)).to.deep.include({ schedule: 'tick', occurrence: last });
  });

  it('a PUT is refused with 400 naming the field: an unknown time zone, both cron and every, an item the queue\'s schema refuses', async () => {
    const put = (def: unknown) => request(server.url, `/api/v2/def?path=${HOST}/svc-queues/${uniqueName('bad')}.json`, { method: 'PUT', token: server.masterToken, body: JSON.stringify(def) });
    const zone = await put({ schedules: { nightly: { cron: '0 3 * * *', timezone: 'Europe/Atlantis' } } });
    expect(zone.status).to.equal(400);
    expect(zone.text).to.match(/schedules\.nightly\.timezone/);
    const both = await put({ schedules: { a: { cron: '0 3 * * *', every: 60 } } });
    expect(both.status).to.equal(400);
    expect(both.text).to.match(/schedules\.a must have exactly one of cron and every/);
    const item = await put({ schema: { type: 'object', required: ['src'] }, schedules: { a: { every: 60, item: {} } } });
    expect(item.status).to.equal(400);
    expect(item.text).to.match(/schedules\.a\.item does not match/);
  });

  it('across a restart (SIGTERM, and kill -9) no occurrence is posted twice and, with missed "all", none is missed', async () => {
    const name = uniqueName('restart');
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, schedules: { beat: { every: 1, missed: 'all' } } });
    await sleep(2500);
    await server.stop();
    server = await startServer({ root: server.root });
    await sleep(2000);
    await server.kill9();
    server = await startServer({ root: server.root });
    await sleep(2000);
    const [view] = await schedulesOf(server, name);
    let events: Awaited<ReturnType<typeof scheduledEvents>> = [];
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline && !(events = await scheduledEvents(server, name)).some((e) => e.occurrence === view!.last)) await sleep(100);
    const occurrences = events.map((e) => e.occurrence).sort((a, b) => a - b);
    expect(new Set(occurrences).size, 'an occurrence posted twice').to.equal(occurrences.length);
    expect(occurrences.length).to.be.at.least(5);
    // Every second from the first to the last, each once.
    expect(occurrences[occurrences.length - 1]! - occurrences[0]!).to.equal((occurrences.length - 1) * 1000);
    expect(occurrences).to.include(view!.last);
  });
});
