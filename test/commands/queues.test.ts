import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { runCli, type CliResult } from '../support/cli.js';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { HOST, defineQueue, postItem, queueName } from '../worker/support.js';
import type { QueueDetail, QueueEntry } from '../support/operators.js';

// eslint-disable-next-line no-control-regex -- looking for colour codes
const ANSI = /\u001b\[/;

describe('svcq queues and svcq queue HOST/NAME (decisions §1.2, §5.1, §7)', () => {
  const server = serverForSuite();
  const cli = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => runCli([...args, '--url', server.url, '--token', server.masterToken], { env: { NO_COLOR: '', ...env } });

  const queue = queueName('ops');
  const idle = queueName('idle');
  const ids: string[] = [];
  let lease: { worker: string; until: number };

  before(async () => {
    await defineQueue(server, queue);
    await defineQueue(server, idle);
    for (let n = 0; n < 3; n++) ids.push(await postItem(server, queue, { n }));
    const claim = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: JSON.stringify({ worker: 'ops-worker' }) });
    lease = (claim.json as { lease: { worker: string; until: number } }).lease;
  });

  it('svcq queues --json prints the answer of GET /api/v2/queues (decisions §7: list commands print the endpoint JSON)', async () => {
    const run = await cli(['queues', '--json']);
    expect(run.code, run.stderr).to.equal(0);
    const printed = JSON.parse(run.stdout) as { queues: QueueEntry[] };
    const served = (await request(server.url, '/api/v2/queues', { token: server.masterToken })).json as { queues: QueueEntry[] };
    // The same answer but for the age, which grows between the two requests.
    const ageless = (list: { queues: QueueEntry[] }): unknown => list.queues.map((q) => ({ ...q, oldestPendingAgeMs: q.oldestPendingAgeMs === null ? null : 'n' }));
    expect(ageless(printed)).to.deep.equal(ageless(served));
    const mine = printed.queues.find((q) => q.name === queue)!;
    expect(mine.host).to.equal(HOST);
    expect(mine.counts).to.deep.equal({ pending: 2, claimed: 1, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 });
    expect(mine.rates).to.deep.equal({ posted: 3 / 60, claimed: 1 / 60, finished: 0, failed: 0 });
    expect(printed.queues.find((q) => q.name === idle)!.oldestPendingAgeMs).to.equal(null);
  });

  it('svcq queues against some other web server (200 with a page, or JSON of another shape) is one sentence and exit 1, not a TypeError', async () => {
    for (const [type, body, why] of [['text/html', '<html>welcome</html>', ' gave no JSON object'], ['application/json', '{"status":"ok"}', ': "queues" is missing']] as const) {
      const other = http.createServer((_req, res) => res.writeHead(200, { 'content-type': type }).end(body));
      await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
      try {
        const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
        const run = await runCli(['queues', '--url', url, '--token', server.masterToken]);
        expect(run.code, run.stderr).to.equal(1);
        expect(run.stdout).to.equal('');
        expect(run.stderr).to.equal(`svcq: ${url} did not answer as svcq does (GET /api/v2/queues${why}): is --url right?\n`);
      } finally {
        other.close();
      }
    }
  });

  it('svcq queue, tasks, logs, stats, manifest and item against some other web server (200 with a page) are one sentence and exit 1, also with --json, not a TypeError (decisions §1.2)', async () => {
    const other = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>welcome</html>'));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
      const commands: Array<[string[], string]> = [
        [['queue', `${HOST}/${queue}`], `GET /api/v2/queues/${HOST}/${queue}`],
        [['tasks'], 'GET /api/v2/tasks'],
        [['logs'], 'GET /api/v2/logs'],
        [['stats'], 'GET /api/v2/stats'],
        [['manifest'], 'GET /api/v2/manifest'],
        [['item', queue, '0000000000000000', '--host', HOST], `GET /${queue}/items/0000000000000000`],
      ];
      for (const [args, asked] of commands) {
        const sentence = `${url} did not answer as svcq does (${asked} gave no JSON object): is --url right?`;
        const run = await runCli([...args, '--url', url, '--token', server.masterToken], { env: { NO_COLOR: '1' } });
        expect(run.code, run.stderr).to.equal(1);
        expect(run.stdout, args[0]).to.equal('');
        expect(run.stderr).to.equal(`svcq: ${sentence}\n`);
        const json = await runCli([...args, '--json', '--url', url, '--token', server.masterToken]);
        expect(json.code).to.equal(1);
        expect(JSON.parse(json.stderr)).to.deep.equal({ error: sentence });
      }
    } finally {
      other.close();
    }
  });

  it('svcq queues prints a table: host, queue, the counts, the oldest pending age and the rates (decisions §5.1)', async () => {
    const run = await cli(['queues']);
    expect(run.code, run.stderr).to.equal(0);
    const [header] = run.stdout.split('\n').filter((l) => l.includes('host'));
    for (const column of ['host', 'queue', 'pending', 'claimed', 'processing', 'finished', 'failed', 'oldest pending', 'posted/s', 'claimed/s', 'finished/s', 'failed/s']) expect(header).to.include(column);
    const row = run.stdout.split('\n').find((l) => l.includes(queue))!;
    const cells = row.split('│').map((c) => c.trim()).filter((c) => c !== '');
    expect(cells.slice(0, 7)).to.deep.equal([HOST, queue, '2', '1', '0', '0', '0']);
    expect(cells[7]).to.match(/^\d+(ms|\.\ds|s)$/);
    expect(cells.slice(8)).to.deep.equal(['0.05', '0.02', '0', '0']);
    const idleRow = run.stdout.split('\n').find((l) => l.includes(idle))!;
    expect(idleRow.split('│').map((c) => c.trim())[8]).to.equal('-');
    expect(run.stdout).to.include('rates per second over the last 60 s');
  });

  it('colours follow the terminal, FORCE_COLOR and NO_COLOR (NO_COLOR wins)', async () => {
    const plain = await cli(['queues']);
    expect(ANSI.test(plain.stdout)).to.equal(false);
    const forced = await cli(['queues'], { FORCE_COLOR: '1' });
    expect(ANSI.test(forced.stdout)).to.equal(true);
    const none = await cli(['queues'], { FORCE_COLOR: '1', NO_COLOR: '1' });
    expect(none.code, none.stderr).to.equal(0);
    expect(ANSI.test(none.stdout)).to.equal(false);
    const detail = await cli(['queue', `${HOST}/${queue}`], { FORCE_COLOR: '1', NO_COLOR: '1' });
    expect(ANSI.test(detail.stdout)).to.equal(false);
  });

  it('svcq queue HOST/NAME --json prints the queue with its oldest pending items and leases (decisions §5.1)', async () => {
    const run = await cli(['queue', `${HOST}/${queue}`, '--json']);
    expect(run.code, run.stderr).to.equal(0);
    const detail = JSON.parse(run.stdout) as QueueDetail;
    expect(detail.host).to.equal(HOST);
    expect(detail.name).to.equal(queue);
    expect(detail.counts.pending).to.equal(2);
    expect(detail.oldest.map((o) => [o.id, o.attempts])).to.deep.equal([
      [ids[1], 0],
      [ids[2], 0],
    ]);
    expect(detail.leases).to.deep.equal([{ id: ids[0], worker: 'ops-worker', until: lease.until, attempts: 1 }]);
  });

  it('svcq queue HOST/NAME shows the counts, the oldest pending items and the leases', async () => {
    const run = await cli(['queue', `${HOST}/${queue}`]);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout).to.include(`${HOST}/${queue}`);
    expect(run.stdout).to.include('oldest pending (2)');
    expect(run.stdout).to.include('leases (1, soonest end first)');
    expect(run.stdout).to.include(ids[1]!);
    expect(run.stdout).to.include(ids[2]!);
    const leaseRow = run.stdout.split('\n').find((l) => l.includes(ids[0]!))!;
    expect(leaseRow).to.include('ops-worker');
    expect(run.stdout).to.match(/per second over the last 60 s: posted 0\.05, claimed 0\.02, finished 0, failed 0/);
  });

  it('svcq queue HOST/NAME shows a worker\'s name with its control characters as ?: a name cannot write to the terminal or break a row', async () => {
    const named = queueName('named');
    await defineQueue(server, named);
    const id = await postItem(server, named, { n: 1 });
    // Any queue user names the worker in its claim.
    const claim = await request(server.url, `/${named}/claim`, { method: 'POST', host: HOST, body: JSON.stringify({ worker: 'bad\u001b]0;title\u0007\u001b[31mred\nnext' }) });
    expect(claim.status, claim.text).to.equal(200);
    const run = await cli(['queue', `${HOST}/${named}`]);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stdout).not.to.match(ANSI);
    // eslint-disable-next-line no-control-regex -- looking for control characters
    expect(run.stdout).not.to.match(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(run.stdout.split('\n').find((l) => l.includes(id))).to.include('bad?]0;title??[31mred?next');
  });

  it('an unknown queue is one clear sentence and exit 1; with --json, { error }, on stderr too (decisions §1.2)', async () => {
    const run = await cli(['queue', `${HOST}/no-such-queue`]);
    expect(run.code).to.equal(1);
    expect(run.stdout).to.equal('');
    expect(run.stderr).to.equal(`svcq: no queue "no-such-queue" is defined on host "${HOST}" (svcq queues lists them)\n`);
    const json = await cli(['queue', `other.test/${queue}`, '--json']);
    expect(json.code).to.equal(1);
    expect(json.stdout).to.equal('');
    expect(JSON.parse(json.stderr)).to.deep.equal({ error: `no queue "${queue}" is defined on host "other.test" (svcq queues lists them)` });
  });

  it('svcq queue NAME takes the queue\'s domain from --host or SVCQ_HOST, as the queue commands do; a HOST/ in the argument wins over SVCQ_HOST (decisions §1.2)', async () => {
    const name = async (args: string[], env: Record<string, string>): Promise<string> => {
      const run = await cli(['queue', ...args, '--json'], env);
      expect(run.code, run.stderr).to.equal(0);
      const detail = JSON.parse(run.stdout) as QueueDetail;
      return `${detail.host}/${detail.name}`;
    };
    expect(await name([queue], { SVCQ_HOST: HOST })).to.equal(`${HOST}/${queue}`);
    expect(await name([queue, '--host', HOST], { SVCQ_HOST: '' })).to.equal(`${HOST}/${queue}`);
    expect(await name([`${HOST}/${queue}`], { SVCQ_HOST: 'other.test' })).to.equal(`${HOST}/${queue}`);
    // Shown as a person reads it too, not only with --json.
    const shown = await cli(['queue', queue], { SVCQ_HOST: HOST });
    expect(shown.code, shown.stderr).to.equal(0);
    expect(shown.stdout).to.include(`${HOST}/${queue}`);
  });

  it('svcq queue HOST/NAME with a --host that names another host, or a bad SVCQ_HOST, is a usage error (exit 2) naming both', async () => {
    const twice = await cli(['queue', `${HOST}/${queue}`, '--host', 'other.test']);
    expect(twice.code).to.equal(2);
    expect(twice.stderr).to.equal(`svcq: "${HOST}/${queue}" names host "${HOST}", and --host names "other.test": give the host once\n`);
    const bad = await cli(['queue', queue], { SVCQ_HOST: 'Bad_Host' });
    expect(bad.code).to.equal(2);
    expect(bad.stderr).to.match(/^svcq: "Bad_Host" \(SVCQ_HOST\) is not a valid host/);
  });

  it('a malformed HOST/NAME is a usage error (exit 2) that names the problem', async () => {
    const noSlash = await cli(['queue', queue], { SVCQ_HOST: '' });
    expect(noSlash.code).to.equal(2);
    expect(noSlash.stderr).to.equal(`svcq: "${queue}" names no host: give HOST/NAME (e.g. jobs.example.com/${queue}), or the queue's domain with --host or SVCQ_HOST\n`);
    const badHost = await cli(['queue', `Bad_Host/${queue}`]);
    expect(badHost.code).to.equal(2);
    expect(badHost.stderr).to.match(/^svcq: "Bad_Host" is not a valid host/);
    const badName = await cli(['queue', `${HOST}/api`]);
    expect(badName.code).to.equal(2);
    expect(badName.stderr).to.equal('svcq: "api" is not a valid queue name\n');
  });

  it('without the master token both commands meet the wall and say so (decisions §1.2, §4)', async () => {
    const list = await runCli(['queues', '--url', server.url], { env: { SVCQ_TOKEN: '' } });
    expect(list.code).to.equal(1);
    expect(list.stderr).to.match(/^svcq: not found \(wrong token, host or queue\?\): no token was given/);
    const one = await runCli(['queue', `${HOST}/${queue}`, '--url', server.url, '--token', 'wrong']);
    expect(one.code).to.equal(1);
    expect(one.stderr).to.equal('svcq: not found (wrong token, host or queue?)\n');
  });
});
