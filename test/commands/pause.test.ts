import { expect } from 'chai';
import { runCli, type CliResult } from '../support/cli.js';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { HOST, defineQueue, postItem, queueName } from '../worker/support.js';
import type { QueueDetail, QueueEntry } from '../support/operators.js';

describe('svcq pause and svcq resume HOST/NAME (decisions §1.2, §8.4)', () => {
  const server = serverForSuite();
  const cli = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => runCli([...args, '--url', server.url, '--token', server.masterToken], { env: { NO_COLOR: '', SVCQ_HOST: '', ...env } });
  const claim = async (queue: string): Promise<Record<string, unknown>> => (await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{"worker":"w"}' })).json as Record<string, unknown>;

  it('svcq pause leaves the queue leasing nothing and says so; svcq queues, svcq queue and svcq top show it; svcq resume leases again; each as often as asked (exit 0)', async () => {
    const queue = queueName('held');
    const other = queueName('running');
    await defineQueue(server, queue);
    await defineQueue(server, other);
    const id = await postItem(server, queue, { n: 1 });
    for (let n = 0; n < 2; n++) {
      const run = await cli(['pause', `${HOST}/${queue}`]);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stdout).to.equal(`${HOST}/${queue} is paused: its claims find nothing until svcq resume ${HOST}/${queue}\n`);
    }
    expect(await claim(queue)).to.deep.equal({ ok: true, empty: true });
    const queues = await cli(['queues']);
    expect(queues.stdout.split('\n').find((l) => l.includes(queue))).to.include(`${queue} (paused)`);
    expect(queues.stdout.split('\n').find((l) => l.includes(other))).to.not.include('(paused)');
    const one = await cli(['queue', `${HOST}/${queue}`]);
    expect(one.stdout).to.include(`paused: its claims find nothing until svcq resume ${HOST}/${queue}`);
    const top = await cli(['top']);
    expect(top.stdout.split('\n').find((l) => l.includes(queue))).to.include(`${queue} (paused)`);
    for (let n = 0; n < 2; n++) {
      const run = await cli(['resume', `${HOST}/${queue}`]);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stdout).to.equal(`${HOST}/${queue} is not paused: its claims lease items\n`);
    }
    expect((await claim(queue)).id).to.equal(id);
    expect((await cli(['queues'])).stdout).to.not.include(`${queue} (paused)`);
  });

  it('--json prints the answer of POST …/pause and …/resume, and svcq queues --json and svcq queue --json carry paused (decisions §7)', async () => {
    const queue = queueName('json');
    await defineQueue(server, queue);
    const paused = await cli(['pause', queue, '--host', HOST, '--json']);
    expect(paused.code, paused.stderr).to.equal(0);
    expect(JSON.parse(paused.stdout)).to.deep.equal({ paused: true });
    const list = JSON.parse((await cli(['queues', '--json'])).stdout) as { queues: QueueEntry[] };
    expect(list.queues.find((q) => q.name === queue)!.paused).to.equal(true);
    const detail = JSON.parse((await cli(['queue', `${HOST}/${queue}`, '--json'])).stdout) as QueueDetail;
    expect(detail.paused).to.equal(true);
    const resumed = await cli(['resume', queue, '--json'], { SVCQ_HOST: HOST });
    expect(resumed.code, resumed.stderr).to.equal(0);
    expect(JSON.parse(resumed.stdout)).to.deep.equal({ paused: false });
  });

  it('an unknown queue is one clear sentence and exit 1 (with --json, { error } on stderr); a malformed HOST/NAME a usage error, exit 2; without the master token, the wall', async () => {
    for (const command of ['pause', 'resume']) {
      const unknown = await cli([command, `${HOST}/no-such-queue`]);
      expect(unknown.code).to.equal(1);
      expect(unknown.stdout).to.equal('');
      expect(unknown.stderr).to.equal(`svcq: no queue "no-such-queue" is defined on host "${HOST}" (svcq queues lists them)\n`);
      const json = await cli([command, `${HOST}/no-such-queue`, '--json']);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stderr)).to.deep.equal({ error: `no queue "no-such-queue" is defined on host "${HOST}" (svcq queues lists them)` });
      const noHost = await cli([command, 'orphan']);
      expect(noHost.code).to.equal(2);
      expect(noHost.stderr).to.equal(`svcq: "orphan" names no host: give HOST/NAME (e.g. jobs.example.com/orphan), or the queue's domain with --host or SVCQ_HOST\n`);
      const badName = await cli([command, `${HOST}/api`]);
      expect(badName.code).to.equal(2);
      expect(badName.stderr).to.equal('svcq: "api" is not a valid queue name\n');
      const walled = await runCli([command, `${HOST}/anything`, '--url', server.url, '--token', 'wrong']);
      expect(walled.code).to.equal(1);
      expect(walled.stderr).to.equal('svcq: not found (wrong token, host or queue?)\n');
    }
  });
});
