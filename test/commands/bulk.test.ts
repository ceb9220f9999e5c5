import { expect } from 'chai';
import { runCli, type CliResult } from '../support/cli.js';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { HOST, defineQueue, getItem, postItem, queueName } from '../worker/support.js';

/** Posts `n` items to a queue in batches of up to 1,000. */
async function postBatch(url: string, queue: string, n: number): Promise<void> {
  for (let done = 0; done < n; done += 1000) {
    const items = Array.from({ length: Math.min(1000, n - done) }, (_, i) => ({ n: done + i }));
    const reply = await request(url, `/${queue}/batch`, { method: 'POST', host: HOST, body: JSON.stringify(items) });
    expect(reply.status, reply.text).to.equal(200);
  }
}

describe('svcq redrive, svcq retry and svcq cancel --all HOST/NAME (decisions §1.2, §8.6)', function () {
  this.timeout(60_000);
  const server = serverForSuite();
  const cli = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => runCli([...args, '--url', server.url, '--token', server.masterToken], { env: { NO_COLOR: '1', SVCQ_HOST: '', ...env } });

  it('a bad --status or --max, an id with --all, no id without it, and --status without --all are usage errors (exit 2) and change nothing', async () => {
    const queue = queueName('usage');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 1 });
    const retry = await cli(['retry', `${HOST}/${queue}`, '--status', 'failed,pending']);
    expect(retry.code).to.equal(2);
    expect(retry.stderr).to.equal('svcq: --status must list statuses among failed, timedout, cancelled (comma-separated): "pending" is not one\n');
    const cancel = await cli(['cancel', `${HOST}/${queue}`, '--all', '--status', 'finished']);
    expect(cancel.code).to.equal(2);
    expect(cancel.stderr).to.equal('svcq: --status must list statuses among pending, claimed, processing (comma-separated): "finished" is not one\n');
    expect((await cli(['redrive', `${HOST}/${queue}`, '--max', '0'])).code).to.equal(2);
    const both = await cli(['cancel', `${HOST}/${queue}`, id, '--all']);
    expect(both.code).to.equal(2);
    expect(both.stderr).to.equal('svcq: give an item id, or --all, not both\n');
    const neither = await cli(['cancel', queue, '--host', HOST]);
    expect(neither.code).to.equal(2);
    expect(neither.stderr).to.equal('svcq: give the id of the item to cancel, or --all to cancel every pending item of the queue\n');
    const lone = await cli(['cancel', queue, id, '--host', HOST, '--status', 'pending']);
    expect(lone.code).to.equal(2);
    expect(lone.stderr).to.include('--all');
    expect((await getItem(server, queue, id)).status).to.equal('pending');
  });

  it('an unknown queue is one clear sentence and exit 1 (with --json, { error } on stderr); without the master token, the wall', async () => {
    for (const args of [['redrive'], ['retry'], ['cancel', '--all']]) {
      const [command, ...flags] = args as [string, ...string[]];
      const unknown = await cli([command, `${HOST}/no-such-queue`, ...flags]);
      expect(unknown.code).to.equal(1);
      expect(unknown.stdout).to.equal('');
      expect(unknown.stderr).to.equal(`svcq: no queue "no-such-queue" is defined on host "${HOST}" (svcq queues lists them)\n`);
      const json = await cli([command, `${HOST}/no-such-queue`, ...flags, '--json']);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stderr)).to.deep.equal({ error: `no queue "no-such-queue" is defined on host "${HOST}" (svcq queues lists them)` });
      const walled = await runCli([command, `${HOST}/anything`, ...flags, '--url', server.url, '--token', 'wrong'], { env: { NO_COLOR: '1' } });
      expect(walled.code).to.equal(1);
      expect(walled.stderr).to.equal('svcq: not found (wrong token, host or queue?)\n');
    }
  });

  it('--help says what each does and how cancel --all differs from cancelling one item', async () => {
    const help = await runCli(['cancel', '--help']);
    expect(help.stdout).to.include('--all');
    expect(help.stdout).to.include('master token');
    for (const command of ['redrive', 'retry']) {
      const text = (await runCli([command, '--help'])).stdout;
      expect(text).to.include('HOST/NAME');
      expect(text).to.include('--max');
    }
  });

  it('svcq cancel --all cancels every pending item in requests of up to 1,000, one line per request off a terminal, and ends with the total; --json prints the totals (needs Store.bulk)', async () => {
    const queue = queueName('cancel');
    await defineQueue(server, queue);
    await postBatch(server.url, queue, 1500);
    const run = await cli(['cancel', `${HOST}/${queue}`, '--all']);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stderr.trim().split('\n')).to.deep.equal([`${HOST}/${queue}: 1000 cancelled so far, more left`, `${HOST}/${queue}: 1500 cancelled so far`]);
    expect(run.stdout).to.equal(`${HOST}/${queue}: 1500 items (pending) cancelled\n`);
    const again = await cli(['retry', `${HOST}/${queue}`, '--status', 'cancelled', '--max', '10', '--json']);
    expect(again.code, again.stderr).to.equal(0);
    expect(again.stderr).to.equal('');
    expect(JSON.parse(again.stdout)).to.deep.equal({ queue: `${HOST}/${queue}`, retried: 10, more: true, status: ['cancelled'], requests: 1, interrupted: false });
  });

  it('svcq retry makes failed items pending again; svcq redrive sends dead letters back (needs the stores\' dead letters and Store.bulk)', async () => {
    const dead = queueName('dead');
    const queue = queueName('mail');
    await defineQueue(server, dead);
    await defineQueue(server, queue, { maxAttempts: 1, deadLetter: dead });
    const id = await postItem(server, queue, { to: 'ann' });
    const claim = await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{"worker":"w"}' });
    expect((claim.json as { id: string }).id).to.equal(id);
    await request(server.url, `/${queue}/items/${id}/error`, { method: 'POST', host: HOST, body: '{"reason":"x"}' });
    const shown = await cli(['queue', `${HOST}/${queue}`]);
    expect(shown.stdout).to.include(`dead letters: 1 pending in ${dead} (svcq redrive ${HOST}/${dead} sends them back)`);
    const redrive = await cli(['redrive', `${HOST}/${dead}`]);
    expect(redrive.code, redrive.stderr).to.equal(0);
    expect(redrive.stdout).to.equal(`${HOST}/${dead}: 1 dead letter moved back to the queues they came from\n`);
    const retry = await cli(['retry', queue, '--host', HOST]);
    expect(retry.code, retry.stderr).to.equal(0);
    expect(retry.stdout).to.equal(`${HOST}/${queue}: 1 item (failed, timedout) pending again\n`);
    expect((await getItem(server, queue, id)).status).to.equal('pending');
  });

  it('svcq queue shows the limits, the claims held back and the dead letters; svcq top shows in flight against maxActive, held and dead letters', async () => {
    const dead = queueName('letters');
    const queue = queueName('limited');
    await defineQueue(server, dead);
    await postItem(server, dead, { n: 1 });
    await defineQueue(server, queue, { maxActive: 4, rateLimit: { max: 10, perSeconds: 60 }, deadLetter: dead });
    await postItem(server, queue, { n: 1 });
    await request(server.url, `/${queue}/claim`, { method: 'POST', host: HOST, body: '{"worker":"w"}' });
    const shown = await cli(['queue', `${HOST}/${queue}`]);
    expect(shown.code, shown.stderr).to.equal(0);
    expect(shown.stdout).to.include('limits: maxActive 4 (1 active), rateLimit 10 per 60 s');
    expect(shown.stdout).to.include('claims held back (this node, since it started): none');
    expect(shown.stdout).to.include(`dead letters: 1 pending in ${dead}`);
    const top = await cli(['top']);
    expect(top.code, top.stderr).to.equal(0);
    const lines = top.stdout.split('\n');
    expect(lines.find((l) => l.includes('in flight'))).to.match(/held .*dead letters/);
    const row = lines.find((l) => l.includes(queue))!;
    expect(row).to.include('1/4');
  });
});
