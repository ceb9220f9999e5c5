import { spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { runCli, type CliResult } from '../support/cli.js';
import { request } from '../support/http.js';
import { faultProxy } from '../support/fault-proxy.js';
import { BIN, serverForSuite } from '../support/server.js';
import { HOST, defineQueue, getItem, postItem, queueName } from '../worker/support.js';

describe('svcq post, item, cancel (decisions §1.2, §3.5, §3.6)', () => {
  const server = serverForSuite();

  const cli = (args: string[], input?: string): Promise<CliResult> => runCli([...args, '--url', server.url, '--host', HOST], { input });
  const lines = (text: string): unknown[] => text.trim().split('\n').map((l) => JSON.parse(l) as unknown);
  /** Items pending in the queue, from the operators' view (decisions §5.1). */
  const pending = async (queue: string): Promise<number> => {
    const view = await request(server.url, `/api/v2/queues/${HOST}/${queue}`, { token: server.masterToken });
    return (view.json as { counts: { pending: number } }).counts.pending;
  };

  it('posts the JSON argument and prints the id and status; --json prints the server { ok, id, status } (decisions §7)', async () => {
    const queue = queueName('post');
    await defineQueue(server, queue);
    const plain = await cli(['post', queue, '{"n":1}']);
    expect(plain.code, plain.stderr).to.equal(0);
    const [id, status] = plain.stdout.trim().split(' ');
    expect(id).to.match(/^[0-9a-f]{16}$/);
    expect(status).to.equal('pending');
    const json = await cli(['post', queue, '{"n":2}', '--json']);
    const answer = JSON.parse(json.stdout) as { ok: boolean; id: string; status: string };
    expect(answer).to.include({ ok: true, status: 'pending' });
    const item = await getItem(server, queue, answer.id);
    expect(item.status).to.equal('pending');
  });

  it('posts every line of JSON lines on stdin, one result line each with --json, in input order', async () => {
    const queue = queueName('lines');
    await defineQueue(server, queue);
    const run = await cli(['post', queue, '-', '--json'], '{"n":1}\n{"n":2}\n\n{"n":3}\n');
    expect(run.code, run.stderr).to.equal(0);
    const results = lines(run.stdout) as Array<{ ok: boolean; id: string }>;
    expect(results).to.have.length(3);
    const claimed: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const reply = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{}' });
      claimed.push((reply.json as { item: unknown }).item);
    }
    expect(claimed).to.deep.equal([{ n: 1 }, { n: 2 }, { n: 3 }]);
  });

  it('posts JSON lines in batches of up to 1,000 items per request, in input order; a line the queue refuses is reported and the rest are posted (decisions §3.8)', async () => {
    const queue = queueName('batched');
    await defineQueue(server, queue, { schema: { type: 'object', required: ['n'] } });
    const input = Array.from({ length: 2500 }, (_, n) => (n === 1234 ? '{"x":1}' : JSON.stringify({ n }))).join('\n');
    const run = await cli(['post', queue, '-', '--json'], input);
    expect(run.code).to.equal(1);
    const outcomeLines = run.stdout.split('\n').filter((l) => l.startsWith('{"ok"'));
    // The verdict is an error, the one line on stderr, in JSON like everything --json prints (decisions §1.2).
    expect(run.stderr.trim().split('\n').map((l) => JSON.parse(l) as unknown)).to.deep.equal([{ error: '1 of 2500 item(s) were not posted' }]);
    const results = outcomeLines.map((l) => JSON.parse(l) as { ok: boolean; id?: string; error?: string });
    expect(results[1234]).to.include({ ok: false, source: 'line 1235 of stdin' });
    expect(results[1234]!.error).to.match(/^\/n: /);
    expect(results).to.have.length(2500);
    expect(results.filter((r) => r.ok)).to.have.length(2499);
    // The access log is written a moment after each answer: read it until the three batches are in.
    let paths: string[] = [];
    for (const until = Date.now() + 5000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
      const log = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken });
      paths = log.text.trim().split('\n').map((l) => (JSON.parse(l) as { path: string }).path);
      if (paths.filter((p) => p === `/${queue}/batch`).length >= 3) break;
    }
    expect(paths.filter((p) => p === `/${queue}/batch`)).to.have.length(3);
    expect(paths.filter((p) => p === `/${queue}`)).to.have.length(0);
    const claimed: number[] = [];
    for (;;) {
      const reply = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{"max":100}' });
      const items = (reply.json as { items: Array<{ item: { n: number } }> }).items;
      if (items.length === 0) break;
      claimed.push(...items.map((i) => i.item.n));
    }
    expect(claimed).to.deep.equal(Array.from({ length: 2500 }, (_, n) => n).filter((n) => n !== 1234));
  });

  it('JSON lines larger in all than one batch may carry (16 MiB) go in several batches, and every item is posted (decisions §3.8)', async () => {
    const queue = queueName('big-lines');
    await defineQueue(server, queue);
    // 1,000 items of 17 kB: 17 MB in all, within the 1,000 items of a batch but past its 16 MiB.
    const pad = 'x'.repeat(17_000);
    const input = Array.from({ length: 1000 }, (_, n) => JSON.stringify({ n, pad })).join('\n');
    const run = await cli(['post', queue, '-'], input);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout.trim().split('\n')).to.have.length(1000);
    expect(await pending(queue)).to.equal(1000);
  });

  it('reads one pretty-printed object from piped stdin when no item argument is given', async () => {
    const queue = queueName('pretty');
    await defineQueue(server, queue);
    const run = await cli(['post', queue], '{\n  "n": 1\n}\n');
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout.trim().split('\n')).to.have.length(1);
  });

  it('rejects bad JSON with one sentence naming the line and the problem, exit 2, and posts nothing', async () => {
    const queue = queueName('bad');
    await defineQueue(server, queue);
    const run = await cli(['post', queue, '-'], '{"n":1}\n[1,2]\n');
    expect(run.code).to.equal(2);
    expect(run.stderr.trim()).to.equal('svcq: line 2 of stdin must be a JSON object, not an array');
    const arg = await cli(['post', queue, '{"n":']);
    expect(arg.code).to.equal(2);
    expect(arg.stderr).to.match(/^svcq: the item argument is not valid JSON: .+\n$/);
    const claim = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{}' });
    expect(claim.json).to.deep.equal({ ok: true, empty: true });
  });

  it('sends --idempotency-key so that a repeated post returns the first item (decisions §3.5)', async () => {
    const queue = queueName('idem');
    await defineQueue(server, queue);
    const first = await cli(['post', queue, '{"n":1}', '--idempotency-key', 'order-7']);
    const second = await cli(['post', queue, '{"n":1}', '--idempotency-key', 'order-7']);
    expect(second.stdout).to.equal(first.stdout);
  });

  it('with JSON lines, --idempotency-key K posts line N under K:N, blank lines counted, so a second run of the same file creates nothing (decisions §3.5)', async () => {
    const queue = queueName('idem-lines');
    await defineQueue(server, queue);
    const input = '{"n":1}\n\n{"n":3}\n';
    const first = await cli(['post', queue, '-', '--idempotency-key', 'k', '--json'], input);
    const ids = first.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id);
    expect(ids).to.have.length(2);
    // The object on line 3 is the item of K:3, as a single post with that key finds it.
    const third = await request(server.url, `/${queue}`, { method: 'POST', host: HOST, body: '{"n":3}', headers: { 'idempotency-key': 'k:3' } });
    expect((third.json as { id: string }).id).to.equal(ids[1]);
    const again = await cli(['post', queue, '-', '--idempotency-key', 'k', '--json'], input);
    expect(again.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { id: string }).id)).to.deep.equal(ids);
  });

  it('a batch whose answer is lost (the server created its items, the connection broke) is sent again without creating any item twice (decisions §3.5, §3.8)', async () => {
    const queue = queueName('lost-batch');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/batch `));
    try {
      proxy.dropAnswers = 1;
      const run = await runCli(['post', queue, '-', '--url', proxy.url, '--host', HOST, '--json'], { input: '{"n":1}\n{"n":2}\n{"n":3}\n' });
      expect(run.code, run.stderr).to.equal(0);
      expect(proxy.matched, 'the batch was sent twice').to.equal(2);
      const ids = lines(run.stdout).map((r) => (r as { id: string }).id);
      expect(new Set(ids).size).to.equal(3);
      expect(await pending(queue), 'items created').to.equal(3);
    } finally {
      proxy.close();
    }
  });

  it('a single post without a key whose answer is lost is not sent again: one sentence says it may have been posted, exit 1; with a key it is sent again (decisions §3.5)', async () => {
    const queue = queueName('lost-post');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue} `));
    try {
      proxy.dropAnswers = 1;
      const run = await runCli(['post', queue, '{"n":1}', '--url', proxy.url, '--host', HOST]);
      expect(run.code).to.equal(1);
      expect(run.stderr).to.match(/; the post went out but no answer came back, so the item may have been posted: posting it again could post it twice: .* a post with --idempotency-key can be repeated safely\n$/);
      expect(proxy.matched, 'a post without a key was sent again').to.equal(1);
      proxy.dropAnswers = 1;
      const keyed = await runCli(['post', queue, '{"n":2}', '--url', proxy.url, '--host', HOST, '--idempotency-key', 'lost-1']);
      expect(keyed.code, keyed.stderr).to.equal(0);
      expect(proxy.matched).to.equal(3);
      expect(await pending(queue), 'one item per post').to.equal(2);
    } finally {
      proxy.close();
    }
  });

  it('when the server goes away partway through JSON lines, what was posted is printed, the rest is summed up in one line, exit 1', async () => {
    const queue = queueName('gone');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/batch `));
    try {
      const input = Array.from({ length: 3000 }, (_, n) => JSON.stringify({ n })).join('\n');
      // Two batches get through; then the server is gone: the third never reaches it.
      proxy.passOnly = 2;
      const run = await runCli(['post', queue, '-', '--url', proxy.url, '--host', HOST], { input });
      expect(run.code).to.equal(1);
      const posted = run.stdout.trim().split('\n').filter(Boolean);
      const created = await pending(queue);
      expect(created).to.equal(2000);
      expect(posted, 'every item created is printed').to.have.length(created);
      // The third batch went out on a connection that was then reset: from the client's side it may have arrived.
      expect(run.stderr).to.include('svcq: 1000 item(s) may or may not have been posted (line 2001 of stdin to line 3000 of stdin): they went out, and no answer said what became of them: cannot reach');
    } finally {
      proxy.close();
    }
  });

  it('a batch that went out and got no answer, then could not be sent again, is reported as maybe posted, not as not posted (decisions §3.8)', async () => {
    const queue = queueName('unsure');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/batch `));
    try {
      // The server creates the batch and its answer is lost; then the server is gone.
      proxy.dropAnswers = 1;
      proxy.passOnly = 1;
      const run = await runCli(['post', queue, '-', '--url', proxy.url, '--host', HOST], { input: '{"n":1}\n{"n":2}\n{"n":3}\n' });
      expect(run.code).to.equal(1);
      expect(run.stderr).to.include('svcq: 3 item(s) may or may not have been posted (line 1 of stdin to line 3 of stdin)');
      expect(run.stderr).to.not.include('not posted (');
      expect(await pending(queue), 'they were posted').to.equal(3);
    } finally {
      proxy.close();
    }
  });

  it('with --idempotency-key, a line whose post went out and got no answer, then could not be sent again, is reported as maybe posted, never as not posted (decisions §3.5)', async () => {
    const queue = queueName('unsure-keyed');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue} `));
    try {
      // The server creates an item and its answer is lost; then the server is gone (connections refused).
      proxy.dropAnswers = 1;
      proxy.goneAfterDrop = true;
      const input = Array.from({ length: 4 }, (_, n) => JSON.stringify({ n })).join('\n');
      const run = await runCli(['post', queue, '-', '--url', proxy.url, '--host', HOST, '--idempotency-key', 'k', '--json'], { input });
      expect(run.code).to.equal(1);
      const outcomes = lines(run.stdout) as Array<{ ok: boolean; source?: string; posted?: boolean | string }>;
      const notPosted = outcomes.filter((o) => o.posted === false).map((o) => Number(/^line (\d+) /.exec(o.source!)![1]) - 1);
      const created: number[] = [];
      for (;;) {
        const reply = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{"max":100}' });
        const items = (reply.json as { items: Array<{ item: { n: number } }> }).items;
        if (items.length === 0) break;
        created.push(...items.map((i) => i.item.n));
      }
      expect(created.length, 'the lost answer was to a post the server took').to.be.above(0);
      expect(created.filter((n) => notPosted.includes(n)), 'items reported not posted that the server has').to.deep.equal([]);
    } finally {
      proxy.close();
    }
  });

  it('with --idempotency-key, a server that keeps answering 503 (it cannot save) stops the run: the lines not sent are summed up in one line, not retried one by one (decisions §6)', async () => {
    let posts = 0;
    const full = http.createServer((req, res) => {
      posts++;
      req.resume();
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"ok":false,"error":"the server could not save the change (its disk is full); nothing was changed, try again later"}');
    });
    await new Promise<void>((resolve) => full.listen(0, '127.0.0.1', resolve));
    try {
      const input = Array.from({ length: 200 }, (_, n) => JSON.stringify({ n })).join('\n');
      const started = Date.now();
      const run = await runCli(['post', 'q', '-', '--url', `http://127.0.0.1:${(full.address() as AddressInfo).port}`, '--host', HOST, '--idempotency-key', 'k'], { input, timeoutMs: 60_000 });
      expect(run.code).to.equal(1);
      // A 503 changed nothing (decisions §6): every line is surely not posted.
      expect(run.stderr).to.equal(
        'svcq: 200 item(s) not posted (line 1 of stdin to line 200 of stdin): the server could not save the change (its disk is full); nothing was changed, try again later\nsvcq: 200 of 200 item(s) were not posted\n',
      );
      // Each of the posts under way when it stopped was tried 5 times; the rest never went out.
      expect(posts).to.be.at.most(8 * 5);
      expect(Date.now() - started).to.be.below(15_000);
    } finally {
      full.close();
    }
  });

  it('Ctrl-C partway through JSON lines sends nothing more, prints what was posted and sums up the rest, exit 1 (decisions §1.2)', async () => {
    const queue = queueName('interrupted');
    await defineQueue(server, queue);
    const proxy = await faultProxy(server.url, new RegExp(`^POST /${queue}/batch `));
    try {
      // One batch gets through; the server is then gone, and the post retries the batches under way.
      proxy.passOnly = 1;
      const input = Array.from({ length: 5000 }, (_, n) => JSON.stringify({ n })).join('\n');
      const proc = spawn(process.execPath, [BIN, 'post', queue, '-', '--url', proxy.url, '--host', HOST], { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
      proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
      proc.stdin.end(input);
      // Batches go two at a time, each with a key of its own: a retry of the second may come before the third.
      for (const until = Date.now() + 20_000; proxy.keys.size < 3 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 20));
      expect(proxy.keys.size, 'the third batch was sent').to.be.at.least(3);
      const signalled = Date.now();
      proc.kill('SIGINT');
      expect(await exited, err).to.equal(1);
      expect(Date.now() - signalled, 'it stopped retrying').to.be.below(5000);
      expect(out.trim().split('\n'), 'the batch posted is printed').to.have.length(1000);
      expect(await pending(queue)).to.equal(1000);
      expect(err).to.include('svcq: 2000 item(s) not posted (line 3001 of stdin to line 5000 of stdin): stopped by a signal before they were sent\n');
      expect(err).to.match(/svcq: 2000 item\(s\) may or may not have been posted \(line 1001 of stdin to line 3000 of stdin\)/);
      expect(err).to.match(/svcq: 2000 of 5000 item\(s\) were not posted, and 2000 may not have been\n$/);
    } finally {
      proxy.close();
    }
  });

  for (const keyed of [false, true]) {
    it(`Ctrl-C partway through JSON lines${keyed ? ' with --idempotency-key' : ''} sends nothing more also while the server answers every request: those under way finish, the rest are summed up as not posted, exit 1 (decisions §1.2)`, async () => {
      // A server that takes half a second to answer each post, and answers every one.
      let requests = 0;
      let created = 0;
      const created16 = (): string => (created++).toString(16).padStart(16, '0');
      const slow = http.createServer((req, res) => {
        requests++;
        let text = '';
        req.on('data', (c: Buffer) => (text += c.toString()));
        req.on('end', () =>
          setTimeout(() => {
            const body = keyed ? { ok: true, id: created16(), status: 'pending' } : { ok: true, items: (JSON.parse(text) as unknown[]).map(() => ({ ok: true, id: created16(), status: 'pending' })) };
            res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
          }, 500),
        );
      });
      await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
      try {
        // Without a key: batches of 1,000, two at a time. With one: a post per line, eight at a time.
        const total = keyed ? 100 : 5000;
        const underWay = keyed ? 8 : 2;
        const input = Array.from({ length: total }, (_, n) => JSON.stringify({ n })).join('\n');
        const url = `http://127.0.0.1:${(slow.address() as AddressInfo).port}`;
        const proc = spawn(process.execPath, [BIN, 'post', 'q', '-', '--url', url, '--host', HOST, ...(keyed ? ['--idempotency-key', 'k'] : [])], { stdio: ['pipe', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
        proc.stderr.on('data', (c: Buffer) => (err += c.toString()));
        const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
        proc.stdin.end(input);
        for (const until = Date.now() + 20_000; requests < underWay && Date.now() < until; ) await new Promise((r) => setTimeout(r, 20));
        proc.kill('SIGINT');
        expect(await exited, err).to.equal(1);
        expect(requests, 'requests sent').to.equal(underWay);
        const posted = keyed ? underWay : underWay * 1000;
        expect(out.trim().split('\n'), 'the items posted are printed').to.have.length(posted);
        expect(err).to.equal(`svcq: ${total - posted} item(s) not posted (line ${posted + 1} of stdin to line ${total} of stdin): stopped by a signal before they were sent\nsvcq: ${total - posted} of ${total} item(s) were not posted\n`);
      } finally {
        slow.close();
      }
    });
  }

  it('two runs of JSON lines without a key are keyed apart: the second one\'s items are all created, not answered with the first one\'s (decisions §3.5, §3.8)', async () => {
    const queue = queueName('two-runs');
    await defineQueue(server, queue);
    const first = await cli(['post', queue, '-', '--json'], '{"n":1}\n{"n":2}\n');
    const second = await cli(['post', queue, '-', '--json'], '{"n":3}\n{"n":4}\n');
    expect(first.code, first.stderr).to.equal(0);
    expect(second.code, second.stderr).to.equal(0);
    const ids = [...lines(first.stdout), ...lines(second.stdout)].map((r) => (r as { id: string }).id);
    expect(new Set(ids).size).to.equal(4);
    expect(await pending(queue)).to.equal(4);
  });

  it('a single post without a key is sent again when it surely changed nothing: the server answered 503, or the post never reached it (decisions §3.5, §6)', async () => {
    // Answers 503 to the first request it gets, then creates the item.
    let requests = 0;
    const flaky = http.createServer((req, res) => {
      requests++;
      req.resume();
      req.on('end', () => {
        if (requests === 1) res.writeHead(503, { 'content-type': 'application/json' }).end('{"ok":false,"error":"the server could not save the change; nothing was changed, try again later"}');
        else res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"id":"00000000000000d1","status":"pending"}');
      });
    });
    await new Promise<void>((resolve) => flaky.listen(0, '127.0.0.1', resolve));
    const { port } = flaky.address() as AddressInfo;
    const url = `http://127.0.0.1:${port}`;
    try {
      const after503 = await runCli(['post', 'q', '{"n":1}', '--url', url, '--host', HOST]);
      expect(after503.code, after503.stderr).to.equal(0);
      expect(after503.stdout).to.equal('00000000000000d1 pending\n');
      expect(requests, 'requests the server got').to.equal(2);
      // Not listening when the post starts: its first tries are refused, and the one after the server is back creates the item.
      await new Promise((resolve) => flaky.close(resolve));
      const refused = runCli(['post', 'q', '{"n":1}', '--url', url, '--host', HOST]);
      // About when a command has started and sent its first tries (it tries for about 1.5 s in all).
      await new Promise((r) => setTimeout(r, 1000));
      await new Promise<void>((resolve) => flaky.listen(port, '127.0.0.1', resolve));
      const result = await refused;
      expect(result.code, result.stderr).to.equal(0);
      expect(result.stdout).to.equal('00000000000000d1 pending\n');
      expect(requests, 'requests the server got').to.equal(3);
    } finally {
      flaky.close();
    }
  });

  /**
   * A gateway in front of the server, as nginx or a load balancer is: it passes each request on,
   * and while `fault` is set answers with that status and a page of its own, whatever the server
   * said (an upstream that reset the connection, or was too slow, after the request reached it).
   */
  async function gateway(): Promise<{ url: string; fault: { status: number; type: string; body: string } | null; goneAfterFault: boolean; seen: number; close: () => void }> {
    const state = { url: '', fault: null as { status: number; type: string; body: string } | null, goneAfterFault: false, seen: 0, close: () => undefined as void };
    const target = new URL(server.url);
    const proxy = http.createServer((req, res) => {
      state.seen++;
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const upstream = http.request({ hostname: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
          const body: Buffer[] = [];
          answer.on('data', (c: Buffer) => body.push(c));
          answer.on('end', () => {
            if (state.fault) {
              res.writeHead(state.fault.status, { 'content-type': state.fault.type, connection: 'close' }).end(state.fault.body);
              // Gone with its answer: later tries find nothing listening.
              if (state.goneAfterFault) proxy.close();
            } else res.writeHead(answer.statusCode ?? 502, answer.headers).end(Buffer.concat(body));
          });
        });
        upstream.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    state.url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    state.close = () => void proxy.close();
    return state;
  }

  it('a single post a proxy answers 502, 503 or 504 after passing it on says the item may have been posted and how to go on safely: without a key it is not sent again (decisions §3.5)', async () => {
    const proxy = await gateway();
    try {
      for (const fault of [
        { status: 502, type: 'text/html', body: '<html><body><h1>502 Bad Gateway</h1></body></html>' },
        // A 503 that is not svcq's { error }: Envoy's after an upstream reset, say. svcq's own changed nothing and is sent again.
        { status: 503, type: 'text/plain', body: 'upstream connect error or disconnect/reset before headers. reset reason: connection termination' },
        { status: 504, type: 'application/json', body: '{"message":"Endpoint request timed out"}' },
      ]) {
        const queue = queueName(`gateway-${fault.status}`);
        await defineQueue(server, queue);
        proxy.fault = fault;
        proxy.seen = 0;
        const run = await runCli(['post', queue, '{"n":1}', '--url', proxy.url, '--host', HOST]);
        expect(run.code, run.stderr).to.equal(1);
        expect(run.stdout).to.equal('');
        expect(proxy.seen, `${fault.status}: a post without a key was sent again`).to.equal(1);
        expect(await pending(queue), `${fault.status}: the proxy passed it on`).to.equal(1);
        expect(run.stderr).to.equal(
          `svcq: the server answered HTTP ${fault.status}; that answer may come from a proxy in front of the server (a gateway or load balancer), after it passed the post on, so the item may have been posted: posting it again could post it twice: the queue's operator can look first (svcq tasks show lists each item posted), and a post with --idempotency-key can be repeated safely\n`,
        );
      }
    } finally {
      proxy.close();
    }
  });

  it('with --idempotency-key, a post a proxy keeps answering 502 says to run it again with the same key, which then prints the one item it created (decisions §3.5)', async () => {
    const proxy = await gateway();
    const queue = queueName('gateway-keyed');
    await defineQueue(server, queue);
    try {
      proxy.fault = { status: 502, type: 'text/html', body: '<html>502 Bad Gateway</html>' };
      const run = await runCli(['post', queue, '{"n":1}', '--url', proxy.url, '--host', HOST, '--idempotency-key', 'order-17']);
      expect(run.code, run.stderr).to.equal(1);
      expect(proxy.seen, 'a post with a key is sent again').to.be.greaterThan(1);
      expect(run.stderr).to.match(/^svcq: the server answered HTTP 502; .* so the item may have been posted: run the same command again with --idempotency-key "order-17": it posts the item at most once, and prints its id\n$/);
      proxy.fault = null;
      const again = await runCli(['post', queue, '{"n":1}', '--url', proxy.url, '--host', HOST, '--idempotency-key', 'order-17']);
      expect(again.code, again.stderr).to.equal(0);
      const view = await request(server.url, `/api/v2/queues/${HOST}/${queue}`, { token: server.masterToken });
      const { oldest } = view.json as { oldest: Array<{ id: string }> };
      expect(oldest.map((o) => o.id)).to.deep.equal([again.stdout.split(' ')[0]]);
    } finally {
      proxy.close();
    }
  });

  it('with --idempotency-key, a post a proxy answered 502 and whose later tries found nothing listening still says the item may have been posted, not only that the server cannot be reached (decisions §3.5)', async () => {
    const proxy = await gateway();
    const queue = queueName('gateway-gone');
    await defineQueue(server, queue);
    try {
      proxy.fault = { status: 502, type: 'text/html', body: '<html>502 Bad Gateway</html>' };
      proxy.goneAfterFault = true;
      const run = await runCli(['post', queue, '{"n":1}', '--url', proxy.url, '--host', HOST, '--idempotency-key', 'order-18']);
      expect(run.code, run.stderr).to.equal(1);
      expect(proxy.seen).to.equal(1);
      expect(await pending(queue), 'the proxy passed it on').to.equal(1);
      expect(run.stderr).to.match(/^svcq: the server answered HTTP 502; .* so the item may have been posted: run the same command again with --idempotency-key "order-18": it posts the item at most once, and prints its id\n$/);
    } finally {
      proxy.close();
    }
  });

  it('refuses an empty or too long --idempotency-key before posting anything, exit 2', async () => {
    const queue = queueName('badkey');
    await defineQueue(server, queue);
    const empty = await cli(['post', queue, '{"n":1}', '--idempotency-key', '']);
    expect(empty.code).to.equal(2);
    expect(empty.stderr).to.match(/--idempotency-key must be 1 to 200 printable ASCII characters/);
    const long = await cli(['post', queue, '-', '--idempotency-key', 'k'.repeat(199)], '{"n":1}\n{"n":2}\n');
    expect(long.code).to.equal(2);
    expect(long.stderr).to.match(/too long for 2 lines/);
    expect(await pending(queue)).to.equal(0);
  });

  it('item --wait long-polls until the item is terminal and prints its record (decisions §3.6)', async () => {
    const queue = queueName('wait');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 1 });
    const proc = spawn(process.execPath, [BIN, 'item', queue, id, '--wait', '--json', '--url', server.url, '--host', HOST], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
    const claim = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{}' });
    expect((claim.json as { id: string }).id).to.equal(id);
    // Not exiting is no event to await: give it well past a CLI start (~0.5 s) to show it keeps waiting.
    await new Promise((r) => setTimeout(r, 1500));
    expect(proc.exitCode).to.equal(null);
    expect(out).to.equal('');
    await request(server.url, `/${queue}/items/${id}/result`, { method: 'POST', host: HOST, body: '{"answer":42}' });
    expect(await exited).to.equal(0);
    expect(JSON.parse(out)).to.include({ id, status: 'finished' }).and.to.have.deep.property('result', { answer: 42 });
  });

  it('item --wait ends when the item times out (timeoutSeconds): timedout is terminal like finished, failed and cancelled (decisions §3.1, §3.6)', async () => {
    const queue = queueName('wait-timedout');
    await defineQueue(server, queue, { timeoutSeconds: 1 });
    const id = await postItem(server, queue, { n: 1 });
    const started = Date.now();
    const run = await runCli(['item', queue, id, '--wait', '--json', '--url', server.url, '--host', HOST], { timeoutMs: 20_000 });
    expect(run.code, run.stderr).to.equal(0);
    expect(JSON.parse(run.stdout)).to.include({ id, status: 'timedout' });
    expect(Date.now() - started, 'it waited past the timeout').to.be.below(10_000);
  });

  it('post --delay, --priority and --group set the item\'s options, and item shows priority, group and when it runs (decisions §8.1)', async () => {
    const queue = queueName('prio');
    await defineQueue(server, queue);
    const run = await cli(['post', queue, '{"n":1}', '--delay', '3600', '--priority', '7', '--group', 'tenant-1', '--json']);
    expect(run.code, run.stderr).to.equal(0);
    const { id } = JSON.parse(run.stdout) as { id: string };
    const record = await getItem(server, queue, id);
    expect(record).to.deep.include({ priority: 7, group: 'tenant-1', runAt: record.postedAt + 3_600_000 });
    const shown = await cli(['item', queue, id]);
    expect(shown.code, shown.stderr).to.equal(0);
    expect(shown.stdout).to.include('\npriority  7\ngroup     tenant-1\n');
    expect(shown.stdout).to.include(`\nruns at   ${new Date(record.postedAt + 3_600_000).toISOString()}\n`);
  });

  it('post --at takes ms or an ISO time with its zone, and JSON lines take the options for each item, in batches and with a key (decisions §8.1)', async () => {
    const queue = queueName('prio');
    await defineQueue(server, queue);
    const at = Date.UTC(2099, 0, 31, 9);
    for (const [flag, extra] of [[String(at), []], ['2099-01-31T09:00:00Z', []], [String(at), ['--idempotency-key', 'k']]] as const) {
      const run = await cli(['post', queue, '-', '--at', flag, '--priority', '-4', ...extra, '--json'], '{"a":1}\n{"a":2}\n');
      expect(run.code, run.stderr).to.equal(0);
      for (const line of lines(run.stdout) as Array<{ id: string }>) expect(await getItem(server, queue, line.id)).to.deep.include({ runAt: at, priority: -4, group: null });
    }
  });

  it('post refuses --delay with --at, and a bad --priority, --at or --group, with one sentence naming the flag, exit 2, posting nothing (decisions §8.1)', async () => {
    const queue = queueName('prio');
    await defineQueue(server, queue);
    for (const args of [['--delay', '5', '--at', '1'], ['--priority', '101'], ['--at', 'tomorrow'], ['--group', ''], ['--delay', '-1']]) {
      const run = await cli(['post', queue, '{}', ...args]);
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).to.equal(2);
      expect(run.stderr, args.join(' ')).to.match(/--(delay|at|priority|group)/);
    }
    expect(await pending(queue)).to.equal(0);
  });

  it('post --callback must be an http(s) URL (exit 2, naming the flag), and one the server may not call is refused by the server, naming ?callback (decisions §9, §9.2)', async () => {
    const queue = queueName('callback');
    await defineQueue(server, queue);
    const bad = await cli(['post', queue, '{}', '--callback', 'ftp://x.test/']);
    expect(bad.code, bad.stderr).to.equal(2);
    expect(bad.stderr).to.include('--callback must be an absolute http:// or https:// URL, not "ftp://x.test/"');
    const outside = await cli(['post', queue, '{}', '--callback', 'http://127.0.0.1:9/done']);
    expect(outside.code, outside.stderr).to.equal(1);
    expect(outside.stderr).to.include('"http://127.0.0.1:9/done" is not a URL this server may call');
    expect(await pending(queue)).to.equal(0);
  });

  it('item prints a readable summary, and "no such item" with exit 1 for an unknown id', async () => {
    const queue = queueName('show');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 1 });
    const shown = await cli(['item', queue, id]);
    expect(shown.code).to.equal(0);
    expect(shown.stdout).to.match(new RegExp(`^id +${id}\\nstatus +pending\\n`));
    const missing = await cli(['item', queue, '0000000000000000']);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.equal('svcq: no such item\n');
  });

  it('item prints the result exactly as it was handed in: a number JSON.parse would round, 1.0, 1e400 (interface §3, decisions §7)', async () => {
    const queue = queueName('exact');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 1 });
    const claim = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{}' });
    expect(claim.status, claim.text).to.equal(200);
    const result = '{"big":12345678901234567890,"one":1.0,"huge":1e400,"list":[-0.10,9007199254740993]}';
    const handed = await request(server.url, `/${queue}/items/${id}/result`, { method: 'POST', host: HOST, body: result });
    expect(handed.status, handed.text).to.equal(200);
    const exact = '{"big":12345678901234567890,"one":1.0,"huge":1e400,"list":[-0.10,9007199254740993]}';
    const shown = await cli(['item', queue, id]);
    expect(shown.code, shown.stderr).to.equal(0);
    expect(shown.stdout).to.include(`\nresult    ${exact}\n`);
    const json = await cli(['item', queue, id, '--json']);
    expect(json.code, json.stderr).to.equal(0);
    expect(json.stdout).to.include('"big": 12345678901234567890').and.include('"one": 1.0').and.include('"huge": 1e400').and.include('-0.10').and.include('9007199254740993');
    // Everything else of the record as the server gave it.
    const record = (await request(server.url, `/${queue}/items/${id}`, { host: HOST })).json as Record<string, unknown>;
    const printed = JSON.parse(json.stdout) as Record<string, unknown>;
    expect({ ...printed, result: null }).to.deep.equal({ ...record, result: null });
  });

  it('cancel makes a pending item cancelled, and says so when it is already terminal (decisions §3.6)', async () => {
    const queue = queueName('cancel');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, {});
    const first = await cli(['cancel', queue, id]);
    expect(first.code, first.stderr).to.equal(0);
    expect(first.stdout).to.equal(`${id} cancelled\n`);
    expect((await getItem(server, queue, id)).status).to.equal('cancelled');
    const again = await cli(['cancel', queue, id, '--json']);
    expect(JSON.parse(again.stdout)).to.deep.equal({ ok: true, accepted: false, status: 'cancelled' });
  });
});
