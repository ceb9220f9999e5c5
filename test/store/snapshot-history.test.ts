import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import type http from 'node:http';
import path from 'node:path';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { agentRequest, defineQueue, keepAliveAgent, pool, PUBLIC_ACCESS, type Json } from '../http/queue-api.js';

const HOST = 'snap.example.com';

/** Polls `check` every 50 ms until it returns true, for at most `ms`. */
async function until(check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

function historyLines(root: string): string[] {
  const dir = path.join(root, '_svcq/tasks');
  return readdirSync(dir)
    .filter((f) => f.startsWith('tasks-'))
    .sort()
    .flatMap((f) => readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean));
}

describe('snapshots and the task history across kill -9 (decisions §5, §6)', function () {
  this.timeout(60_000);
  let root: string;
  let server: TestServer | undefined;
  let agent: http.Agent;

  beforeEach(() => {
    root = tempDir();
    agent = keepAliveAgent(32);
  });
  afterEach(async () => {
    agent.destroy();
    await server?.stop();
    server = undefined;
    cleanupTemp(root);
  });

  const call = (method: string, p: string, body?: unknown): Promise<{ status: number; json: Json }> =>
    agentRequest(agent, server!.url, p, { method, host: HOST, body: body === undefined ? undefined : JSON.stringify(body) });

  it('a journal past --compact-bytes is folded into a snapshot, and after kill -9 every item comes back from snapshot + journal', async () => {
    server = await startServer({ root, args: ['--compact-bytes', '20000'] });
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    const ids = await pool(400, 32, async (i) => (await call('POST', '/q', { i, pad: 'p'.repeat(40) })).json.id as string);
    const claimed = await pool(150, 16, async () => (await call('POST', '/q/claim', { worker: 'w' })).json);
    await pool(60, 16, async (k) => call('POST', `/q/items/${claimed[k]!.id as string}/result`, { k }));
    const storeDir = path.join(root, '_svcq/store');
    await until(() => readdirSync(storeDir).some((f) => /^snapshot-\d+\.jsonl$/.test(f)), 10_000);
    // A few more changes after the snapshot, so that both the snapshot and the journal matter.
    await pool(20, 8, async (k) => call('POST', `/q/items/${claimed[60 + k]!.id as string}/progress`, { percent: k }));
    const before = await pool(ids.length, 32, async (i) => (await call('GET', `/q/items/${ids[i]!}`)).json);

    await server.kill9();
    server = await startServer({ root, args: ['--compact-bytes', '20000'] });
    const after = await pool(ids.length, 32, async (i) => (await call('GET', `/q/items/${ids[i]!}`)).json);
    expect(after).to.deep.equal(before);
    const counts = { pending: 0, claimed: 0, processing: 0, finished: 0 } as Record<string, number>;
    for (const record of after) counts[record.status as string]! += 1;
    expect(counts).to.deep.equal({ pending: 250, claimed: 70, processing: 20, finished: 60 });
    // Files older than the current generation are gone once a snapshot is safe (or at the next start).
    const generations = (): string[] => readdirSync(storeDir).map((f) => /^snapshot-(\d+)\.jsonl$/.exec(f)?.[1]).filter((g): g is string => g !== undefined);
    await until(() => generations().length === 1, 5_000);
    const meta = JSON.parse(readFileSync(path.join(storeDir, 'meta.json'), 'utf8')) as { generation: number };
    expect(String(meta.generation)).to.equal(generations()[0]);
    const journals = readdirSync(storeDir).map((f) => /^journal-(\d+)\.jsonl$/.exec(f)?.[1]).filter((g) => g !== undefined);
    expect(journals.every((n) => Number(n) >= meta.generation), `journals ${journals.join(',')} vs generation ${meta.generation}`).to.equal(true);
  });

  it('a batch whose records and events are written in many pieces comes back whole after kill -9: every item with its exact body, each posted event once, in order (decisions §3.8, §5, §6)', async () => {
    server = await startServer({ root });
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    // 2 × 1,000 items of about 200 bytes: the journal text of each batch is some 300 KiB, its
    // events 150 KiB, each written in pieces of 16 KiB.
    const ids: string[] = [];
    const bodies: string[] = [];
    for (const b of [0, 1]) {
      const items = Array.from({ length: 1000 }, (_, i) => JSON.stringify({ b, i, text: `é—${'x'.repeat(150)}`, n: i * 1.5 }));
      const answer = await call('POST', '/q/batch', JSON.parse(`[${items.join(',')}]`));
      expect(answer.status).to.equal(200);
      for (const e of answer.json.items as Array<{ ok: boolean; id: string }>) ids.push(e.id);
      bodies.push(...items);
    }
    await server.kill9();
    server = await startServer({ root });
    const back = await pool(ids.length, 32, async (i) => (await call('GET', `/q/items/${ids[i]!}`)).json);
    expect(back.every((r) => r.status === 'pending')).to.equal(true);
    // Claimed in posting order, each with the bytes it was posted with.
    for (let k = 0; k < 20; k++) {
      const claim = await call('POST', '/q/claim', { worker: 'w' });
      expect(claim.json.id).to.equal(ids[k]);
      expect(JSON.stringify(claim.json.item)).to.equal(bodies[k]);
    }
    await until(() => historyLines(root).filter((l) => l.includes('"posted"')).length >= ids.length, 5_000);
    const posted = historyLines(root)
      .map((l) => JSON.parse(l) as { id: string; event: string })
      .filter((e) => e.event === 'posted')
      .map((e) => e.id);
    expect(posted).to.deep.equal(ids);
  });

  it('after kill -9 under load, the task history holds every acknowledged transition exactly once (decisions §5)', async () => {
    server = await startServer({ root });
    await defineQueue(server, HOST, 'q', { access: PUBLIC_ACCESS, leaseSeconds: 600 });
    const acknowledged: Array<{ id: string; event: string }> = [];
    let stop = false;
    const worker = async (): Promise<void> => {
      while (!stop) {
        const posted = await call('POST', '/q', { x: 1 }).catch(() => undefined);
        if (!posted || posted.status !== 200) return;
        acknowledged.push({ id: posted.json.id as string, event: 'posted' });
        const claim = await call('POST', '/q/claim', {}).catch(() => undefined);
        if (!claim || claim.status !== 200 || claim.json.empty) return;
        acknowledged.push({ id: claim.json.id as string, event: 'claimed' });
        const result = await call('POST', `/q/items/${claim.json.id as string}/result`, { ok: true }).catch(() => undefined);
        if (!result || result.status !== 200) return;
        acknowledged.push({ id: claim.json.id as string, event: 'finished' });
      }
    };
    const loops = Array.from({ length: 16 }, worker);
    await until(() => acknowledged.length > 1500, 20_000);
    await server.kill9();
    stop = true;
    await Promise.all(loops);

    server = await startServer({ root });
    await until(() => historyLines(root).length >= acknowledged.length, 5_000);
    const lines = historyLines(root);
    const seen = new Map<string, number>();
    for (const line of lines) {
      const event = JSON.parse(line) as { id: string; event: string };
      const key = `${event.id} ${event.event}`;
      seen.set(key, (seen.get(key) ?? 0) + 1);
    }
    for (const a of acknowledged) expect(seen.get(`${a.id} ${a.event}`), `${a.id} ${a.event}`).to.equal(1);
    expect([...seen.values()].every((n) => n === 1), 'no event twice').to.equal(true);
  });
});
