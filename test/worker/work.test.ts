import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { defineUser } from '../http/queue-api.js';
import { cleanupTemp, startServer, tempDir, type TestServer } from '../support/server.js';
import { HOST, defineQueue, getItem, killWorker, postItem, queueName, startWorker, until, waitTerminal, type WorkerProcess } from './support.js';

describe('svcq work (decisions §1.3)', function () {
  this.timeout(30_000);
  let server: TestServer;
  let dir: string;
  let worker: WorkerProcess | undefined;

  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });
  beforeEach(() => {
    dir = tempDir('svcq-work-');
    worker = undefined;
  });
  afterEach(async () => {
    await killWorker(worker);
    cleanupTemp(dir);
  });

  /** Writes a job script into the test's temp dir and returns the command that runs it. */
  const script = (name: string, body: string): string => {
    const file = path.join(dir, name);
    writeFileSync(file, body);
    return `sh ${file}`;
  };
  const work = (args: string[], env: Record<string, string> = {}) =>
    runCli(['work', ...args, '--url', server.url, '--host', HOST, '--wait', '1'], { env });

  it('gives CMD the item on stdin and SVCQ_QUEUE/SVCQ_ITEM_ID/SVCQ_ATTEMPT, and posts a JSON object on stdout as the result', async () => {
    const queue = queueName('json');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 21 });
    const cmd = script('job.sh', 'item=$(cat)\nprintf \'{"item":%s,"queue":"%s","id":"%s","attempt":%s}\\n\' "$item" "$SVCQ_QUEUE" "$SVCQ_ITEM_ID" "$SVCQ_ATTEMPT"\n');
    const run = await work([queue, '--exec', cmd, '--once']);
    expect(run.code, run.stderr).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('finished');
    expect(item.result).to.deep.equal({ item: { n: 21 }, queue, id, attempt: 1 });
    const events = run.stdout.trim().split('\n').map((l) => JSON.parse(l) as { event: string });
    expect(events.map((e) => e.event)).to.deep.equal(['started', 'claimed', 'finished', 'stopped']);
  });

  it('does not give CMD the worker\'s token nor a master token from its environment: a command that handles what anybody posted could print them into a result (decisions §1.3)', async () => {
    const queue = queueName('creds');
    const token = 'worker-token-0123456789abcdef0123';
    await defineUser(server, HOST, 'runner', token);
    await defineQueue(server, queue, { access: { post: 'public', fetch: 'public', work: ['runner'] } });
    const id = await postItem(server, queue, { n: 1 });
    const run = await work([queue, '--exec', 'printf \'{"token":"%s","master":"%s","other":"%s"}\\n\' "$SVCQ_TOKEN" "$SVCQ_MASTER_TOKEN" "$OTHER"', '--once'], { SVCQ_TOKEN: token, SVCQ_MASTER_TOKEN: 'master-0123456789abcdef0123456789', OTHER: 'kept' });
    expect(run.code, run.stderr).to.equal(0);
    expect((await getItem(server, queue, id)).result).to.deep.equal({ token: '', master: '', other: 'kept' });
  });

  it('gives CMD the item exactly as posted, and hands in the result exactly as CMD printed it: integers past 2^53, 1.0, 1e2, spacing (interface §2.1, decisions §1.3, §3.8)', async () => {
    const queue = queueName('exact');
    await defineQueue(server, queue);
    const posted = '{"big":12345678901234567890, "f":1.0,"e":1e2,"item":{"item":1}}';
    const reply = await request(server.url, `/${queue}`, { method: 'POST', host: HOST, body: posted });
    const id = (reply.json as { id: string }).id;
    const seen = path.join(dir, 'stdin.txt');
    const printed = '{"big":98765432109876543210,"f":2.50}';
    // Not --once: the result goes in with the next claim (decisions §3.8).
    worker = startWorker(server, queue, ['--exec', `cat > ${seen}; echo '${printed}'`]);
    await waitTerminal(server, queue, id);
    expect(readFileSync(seen, 'utf8')).to.equal(posted);
    const record = await request(server.url, `/${queue}/items/${id}`, { host: HOST });
    expect(record.text, record.text).to.include(`"result":${printed}`);
  });

  it('posts plain-text stdout as { output } (decisions §1.3)', async () => {
    const queue = queueName('text');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, {});
    const run = await work([queue, '--exec', 'echo hello; echo world', '--once']);
    expect(run.code, run.stderr).to.equal(0);
    expect((await getItem(server, queue, id)).result).to.deep.equal({ output: 'hello\nworld' });
  });

  it('posts ::progress lines as progress, an integer n as { percent: n }, and keeps them out of the result (decisions §1.3)', async () => {
    const queue = queueName('progress');
    await defineQueue(server, queue);
    const first = await postItem(server, queue, { last: '90' });
    const second = await postItem(server, queue, { last: '{"stage":"upload","percent":95}' });
    const job = path.join(dir, 'job.mjs');
    writeFileSync(
      job,
      `let s = ''; for await (const c of process.stdin) s += c;
       const item = JSON.parse(s);
       console.log('::progress 10'); console.log('working'); console.log('::progress ' + item.last);\n`,
    );
    worker = startWorker(server, queue, ['--exec', `"${process.execPath}" ${job}`, '--concurrency', '2']);
    const a = await waitTerminal(server, queue, first);
    const b = await waitTerminal(server, queue, second);
    expect(a.progress).to.deep.equal({ percent: 90 });
    expect(b.progress).to.deep.equal({ stage: 'upload', percent: 95 });
    expect(a.result).to.deep.equal({ output: 'working' });
  });

  it('posts an error record { exitCode, signal, stderr } for a failing CMD; the item is retried, then failed after maxAttempts (decisions §1.3, §3.2)', async () => {
    const queue = queueName('fail');
    await defineQueue(server, queue, { maxAttempts: 2 });
    const id = await postItem(server, queue, {});
    worker = startWorker(server, queue, ['--exec', 'echo "boom $SVCQ_ATTEMPT" >&2; exit 7']);
    const item = await waitTerminal(server, queue, id);
    expect(item.status).to.equal('failed');
    expect(item.attempts).to.equal(2);
    expect(item.error).to.deep.equal({ exitCode: 7, signal: null, stderr: 'boom 2\n' });
    const failed = await worker.waitEvent((e) => e.event === 'failed' && e.status === 'failed', 'the second failure');
    expect(failed).to.include({ id, exitCode: 7, attempts: 2 });
    expect(worker.events.filter((e) => e.event === 'failed').map((e) => e.status)).to.deep.equal(['pending', 'failed']);
    expect(worker.stderr()).to.contain(`[${id}] boom 1\n`);
  });

  it('the error record keeps the last 4 KiB of stderr, not the first (decisions §1.3)', async () => {
    const queue = queueName('tail');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    // 10,000 bytes: lines "0000 …" to "0099 …" of 100 bytes each.
    const script = 'for (let n = 0; n < 100; n++) process.stderr.write(String(n).padStart(4, "0") + " " + "x".repeat(94) + "\\n"); process.exitCode = 2';
    const run = await work([queue, '--exec', `${process.execPath} -e '${script}'`, '--once']);
    expect(run.code, run.stderr).to.equal(1);
    const item = await waitTerminal(server, queue, id);
    const stderr = (item.error as { stderr: string }).stderr;
    expect(Buffer.byteLength(stderr)).to.equal(4096);
    expect(stderr.endsWith(`0099 ${'x'.repeat(94)}\n`)).to.equal(true);
    expect(stderr).not.to.include('0000 ');
  });

  it('a CMD killed by a signal gets an error record with that signal and exitCode null (decisions §1.3)', async () => {
    const queue = queueName('signal');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    const run = await work([queue, '--exec', `${process.execPath} -e "process.kill(process.pid, 'SIGKILL')"`, '--once']);
    expect(run.code, run.stderr).to.equal(1);
    const item = await waitTerminal(server, queue, id);
    expect(item.error).to.deep.include({ exitCode: null, signal: 'SIGKILL' });
  });

  it('keeps the lease alive while CMD runs: a job three times longer than leaseSeconds is claimed once (decisions §3.2)', async () => {
    const queue = queueName('lease');
    await defineQueue(server, queue, { leaseSeconds: 1 });
    const id = await postItem(server, queue, {});
    // A second slot would claim the item again if its lease ran out.
    worker = startWorker(server, queue, ['--exec', 'sleep 3; echo \'{"slow":true}\'', '--concurrency', '2']);
    const item = await waitTerminal(server, queue, id);
    expect(item.status).to.equal('finished');
    expect(item.attempts).to.equal(1);
    expect(item.result).to.deep.equal({ slow: true });
    expect(worker.events.filter((e) => e.event === 'claimed')).to.have.length(1);
  });

  it('runs --concurrency 4 commands at once', async () => {
    const queue = queueName('four');
    await defineQueue(server, queue);
    const ids = await Promise.all([1, 2, 3, 4].map((n) => postItem(server, queue, { n })));
    const markers = path.join(dir, 'markers');
    // Each job marks its start, then waits (at most 5 s) until four have started.
    const cmd = script('job.sh', `mkdir -p ${markers}; touch ${markers}/$SVCQ_ITEM_ID; i=0\nwhile [ "$(ls ${markers} | wc -l)" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\nls ${markers} | wc -l\n`);
    worker = startWorker(server, queue, ['--exec', cmd, '--concurrency', '4']);
    for (const id of ids) {
      const item = await waitTerminal(server, queue, id);
      expect((item.result as { output: string }).output.trim()).to.equal('4');
    }
  });

  it('stops CMD (SIGTERM) when its item is cancelled (decisions §3.6)', async () => {
    const queue = queueName('cancel');
    await defineQueue(server, queue, { leaseSeconds: 1 });
    const id = await postItem(server, queue, {});
    const cmd = script('job.sh', `trap 'touch ${dir}/stopped; exit 1' TERM\ntouch ${dir}/started\nsleep 10 & wait $!\necho finished-anyway\n`);
    worker = startWorker(server, queue, ['--exec', cmd]);
    await until(() => existsSync(path.join(dir, 'started')), 'the job to start');
    const cancel = await runCli(['cancel', queue, id, '--url', server.url, '--host', HOST]);
    expect(cancel.code, cancel.stderr).to.equal(0);
    const event = await worker.waitEvent((e) => e.event === 'cancelled', 'the cancelled event');
    expect(event).to.include({ id, status: 'cancelled' });
    expect(existsSync(path.join(dir, 'stopped'))).to.equal(true);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('cancelled');
    expect(item.result).to.equal(null);
  });

  it('with --once, an item cancelled while its command runs ends the worker with exit 1: nothing was done (docs/behaviour.md: svcq work)', async () => {
    const queue = queueName('once-cancel');
    await defineQueue(server, queue, { leaseSeconds: 1 });
    const id = await postItem(server, queue, {});
    const cmd = script('job.sh', `touch ${dir}/started\nsleep 10\necho ok\n`);
    worker = startWorker(server, queue, ['--exec', cmd, '--once']);
    await until(() => existsSync(path.join(dir, 'started')), 'the job to start');
    const cancel = await runCli(['cancel', queue, id, '--url', server.url, '--host', HOST]);
    expect(cancel.code, cancel.stderr).to.equal(0);
    expect(await worker.exited).to.equal(1);
    expect((await getItem(server, queue, id)).status).to.equal('cancelled');
  });

  it('counts a cancelled item as cancelled, not failed: "stopped: N done, M failed, K cancelled" (decisions §3.6)', async () => {
    const queue = queueName('counts');
    // A short lease: the worker hears of the cancel at the next heartbeat.
    await defineQueue(server, queue, { leaseSeconds: 1 });
    const slow = await postItem(server, queue, { slow: true });
    // The slow item's job waits to be cancelled; the other one finishes at once.
    const cmd = script('job.sh', `if grep -q '"slow":true'; then touch ${dir}/started; sleep 10; fi\necho ok\n`);
    worker = startWorker(server, queue, ['--exec', cmd, '--concurrency', '2']);
    await until(() => existsSync(path.join(dir, 'started')), 'the slow job to start');
    const cancel = await runCli(['cancel', queue, slow, '--url', server.url, '--host', HOST]);
    expect(cancel.code, cancel.stderr).to.equal(0);
    await worker.waitEvent((e) => e.event === 'cancelled', 'the cancelled event');
    const quick = await postItem(server, queue, { slow: false });
    expect((await waitTerminal(server, queue, quick)).status).to.equal('finished');
    worker.proc.kill('SIGTERM');
    expect(await worker.exited).to.equal(0);
    const stopped = await worker.waitEvent((e) => e.event === 'stopped', 'the stopped event');
    expect(stopped).to.include({ done: 1, failed: 0, cancelled: 1 });
  });

  it('on SIGTERM claims nothing new, lets the running command finish and deliver, then exits 0 (decisions §1.3)', async () => {
    const queue = queueName('graceful');
    await defineQueue(server, queue);
    const running = await postItem(server, queue, { n: 1 });
    const waiting = await postItem(server, queue, { n: 2 });
    const cmd = script('job.sh', `touch ${dir}/started\nsleep 1\necho '{"done":true}'\n`);
    worker = startWorker(server, queue, ['--exec', cmd]);
    await until(() => existsSync(path.join(dir, 'started')), 'the job to start');
    worker.proc.kill('SIGTERM');
    expect(await worker.exited).to.equal(0);
    const item = await getItem(server, queue, running);
    expect(item.status).to.equal('finished');
    expect(item.result).to.deep.equal({ done: true });
    expect((await getItem(server, queue, waiting)).status).to.equal('pending');
  });

  it('on a second signal stops the running command and posts its error record (decisions §1.3)', async () => {
    const queue = queueName('force');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    const cmd = script('job.sh', `touch ${dir}/started\nsleep 10\n`);
    worker = startWorker(server, queue, ['--exec', cmd]);
    await until(() => existsSync(path.join(dir, 'started')), 'the job to start');
    worker.proc.kill('SIGTERM');
    await worker.waitEvent((e) => e.event === 'stopping', 'the first stopping event');
    worker.proc.kill('SIGTERM');
    expect(await worker.exited).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('failed');
    expect(item.error).to.include({ exitCode: null, signal: 'SIGTERM' });
  });

  it('rides out a server restart mid-job and still delivers the result (decisions §1.3, §6)', async () => {
    const own = await startServer();
    try {
      const queue = queueName('restart');
      await defineQueue(own, queue);
      const id = await postItem(own, queue, {});
      const cmd = script('job.sh', `touch ${dir}/started\nwhile [ ! -f ${dir}/go ]; do sleep 0.05; done\necho '{"survived":true}'\n`);
      worker = startWorker(own, queue, ['--exec', cmd]);
      await until(() => existsSync(path.join(dir, 'started')), 'the job to start');
      expect(await own.stop()).to.equal(0);
      // The job ends while the server is down: the result cannot be delivered yet.
      writeFileSync(path.join(dir, 'go'), '');
      // The result goes out with the next claim (decisions §3.8 done): that claim is what is retried.
      await worker.waitEvent((e) => e.event === 'retry' && e.what === 'claim', 'a retried claim carrying the result');
      const again = await startServer({ root: own.root, port: own.port, masterToken: own.masterToken });
      try {
        const item = await waitTerminal(again, queue, id);
        expect(item.status).to.equal('finished');
        expect(item.result).to.deep.equal({ survived: true });
        expect(item.attempts).to.equal(1);
      } finally {
        await killWorker(worker);
        await again.stop();
      }
    } finally {
      await own.stop();
      cleanupTemp(own.root);
    }
  });

  it('hands each result in with its next claim and, with --prefetch, claims several items at once: one request per job or fewer (decisions §3.8)', async () => {
    const own = await startServer();
    try {
      const queue = queueName('handin');
      await defineQueue(own, queue, { leaseSeconds: 60 });
      const ids: string[] = [];
      for (let n = 0; n < 30; n++) ids.push(await postItem(own, queue, { n }));
      worker = startWorker(own, queue, ['--exec', 'cat', '--concurrency', '2', '--prefetch', '5']);
      for (const id of ids) expect((await waitTerminal(own, queue, id)).status).to.equal('finished');
      await until(() => worker!.events.filter((e) => e.event === 'finished').length === 30, 'a finished event per item');
      worker.proc.kill('SIGTERM');
      expect(await worker.exited).to.equal(0);
      const log = await fetch(`${own.url}/api/v2/logs/file?which=active`, { headers: { authorization: `Bearer ${own.masterToken}` } }).then((r) => r.text());
      const paths = log.trim().split('\n').map((l) => (JSON.parse(l) as { path: string }).path).filter((p) => p.startsWith(`/${queue}/`));
      expect(paths.filter((p) => p.endsWith('/result')), 'results submitted on their own').to.deep.equal([]);
      // 30 jobs: each claim carries up to 5 items, so well under one claim per job (the last ones wait out --wait 1).
      expect(paths.filter((p) => p.endsWith('/claim')).length).to.be.below(30);
      expect(worker.events.filter((e) => e.event === 'claimed').map((e) => e.id).sort()).to.deep.equal([...ids].sort());
    } finally {
      await own.stop();
      cleanupTemp(own.root);
    }
  });

  it('with --no-hand-in, submits each result on its own (decisions §1.3)', async () => {
    const queue = queueName('nohandin');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, { n: 1 });
    worker = startWorker(server, queue, ['--exec', 'cat', '--no-hand-in']);
    expect((await waitTerminal(server, queue, id)).result).to.deep.equal({ n: 1 });
  });

  it('claims only items matching --criteria (interface §4.3)', async () => {
    const queue = queueName('criteria');
    await defineQueue(server, queue);
    const small = await postItem(server, queue, { size: 10 });
    const big = await postItem(server, queue, { size: 5000 });
    const run = await work([queue, '--exec', 'cat', '--once', '--criteria', '{"size":{"gt":1000}}']);
    expect(run.code, run.stderr).to.equal(0);
    expect((await getItem(server, queue, big)).status).to.equal('finished');
    expect((await getItem(server, queue, small)).status).to.equal('pending');
  });

  it('stops CMD after --timeout seconds and reports it as an error record (decisions §1.3)', async () => {
    const queue = queueName('timeout');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    const run = await work([queue, '--exec', 'echo started >&2; sleep 5', '--once', '--timeout', '1']);
    expect(run.code).to.equal(1);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('failed');
    expect(item.error).to.deep.equal({ exitCode: null, signal: 'SIGTERM', stderr: 'started\n', reason: 'timed out after 1 s' });
  });

  it('with --once exits 3 when the queue stays empty (decisions §7)', async () => {
    const queue = queueName('empty');
    await defineQueue(server, queue);
    const run = await work([queue, '--exec', 'cat', '--once']);
    expect(run.code).to.equal(3);
    expect(run.stdout).to.contain('"event":"empty"');
  });

  it('says in one sentence that a queue it cannot reach is not found, and exits 1', async () => {
    const run = await work(['no-such-queue', '--exec', 'cat', '--once']);
    expect(run.code).to.equal(1);
    expect(run.stdout).to.match(/not found.*host or queue/);
  });

  it('reports output too large to keep as an error record instead of holding it all in memory', async () => {
    const queue = queueName('huge');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    // 17 million characters on one line: past what the worker keeps for a result.
    const run = await work([queue, '--exec', "head -c 17000000 /dev/zero | tr '\\0' a", '--once']);
    expect(run.code).to.equal(1);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('failed');
    expect((item.error as { reason?: string }).reason).to.match(/^output larger than \d+ characters$/);
  });

  it('a result the server refuses as too large goes in as an error record, and the item is reported failed, as the closing count says (decisions §1.3)', async () => {
    const queue = queueName('refused');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    // 2,000,000 characters: kept by the worker, past the server's 1 MiB body limit.
    const run = await work([queue, '--exec', "head -c 2000000 /dev/zero | tr '\\0' a", '--once', '--json']);
    expect(run.code, run.stderr).to.equal(1);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('failed');
    expect((item.error as { reason?: string }).reason).to.match(/^result rejected: /);
    const events = run.stdout.trim().split('\n').map((l) => JSON.parse(l) as { event: string; id?: string; status?: string; accepted?: boolean; exitCode?: number | null; failed?: number });
    expect(events.map((e) => e.event)).to.deep.equal(['started', 'claimed', 'error', 'failed', 'stopped']);
    expect(events[3]).to.deep.include({ id, status: 'failed', accepted: true, exitCode: 0 });
    expect(events[4]).to.deep.include({ failed: 1 });
  });

  it('a job that prints no progress and ends well within its lease sends none: no heartbeat is due, and its item\'s progress stays null (decisions §3.2, §3.8: one request per job)', async () => {
    const queue = queueName('no-progress');
    await defineQueue(server, queue, { leaseSeconds: 60 });
    const id = await postItem(server, queue, {});
    const run = await work([queue, '--exec', 'cat', '--once']);
    expect(run.code, run.stderr).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('finished');
    expect(item.progress).to.equal(null);
  });

  it('a result the server refuses goes in as an error record also without --once, and the same worker runs the item\'s next attempt (decisions §1.3, §3.2)', async () => {
    const queue = queueName('refused-again');
    await defineQueue(server, queue, { maxAttempts: 2 });
    const id = await postItem(server, queue, {});
    // The first attempt prints 2,000,000 characters, past the server's 1 MiB body limit; the second a small object.
    worker = startWorker(server, queue, ['--exec', `if [ "$SVCQ_ATTEMPT" = 1 ]; then head -c 2000000 /dev/zero | tr '\\0' a; else echo '{"second":true}'; fi`]);
    const item = await waitTerminal(server, queue, id, 20);
    expect(item).to.include({ status: 'finished', attempts: 2 });
    expect(item.result).to.deep.equal({ second: true });
    expect(worker.events.filter((e) => e.event === 'failed').map((e) => e.status)).to.deep.equal(['pending']);
  });

  it('--timeout: a command that catches SIGTERM and exits 0 still gets an error record saying it timed out, not its partial output as a result (decisions §1.3)', async () => {
    const queue = queueName('timeout-trapped');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    const cmd = script('job.sh', "trap 'echo partial; exit 0' TERM\nsleep 5 & wait $!\necho complete\n");
    const run = await work([queue, '--exec', cmd, '--once', '--timeout', '1']);
    expect(run.code, run.stderr).to.equal(1);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('failed');
    expect(item.error).to.include({ exitCode: 0, signal: null, reason: 'timed out after 1 s' });
  });

  it('a command that leaves a process running in the background with its output open is done when the command exits: its result is delivered, not held until that process ends (decisions §1.3)', async () => {
    const queue = queueName('background');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, {});
    const pidFile = path.join(dir, 'background.pid');
    const started = Date.now();
    const run = await work([queue, '--exec', `sleep 30 & echo $! > ${pidFile}; echo ok`, '--once']);
    try {
      expect(run.code, run.stderr).to.equal(0);
      expect(Date.now() - started, 'the worker waited for the background process').to.be.below(10_000);
      expect((await getItem(server, queue, id)).result).to.deep.equal({ output: 'ok' });
    } finally {
      try {
        process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });

  it('a command that ends by a signal after it started is run once: it is started again only when the signal came before it could start (decisions §1.3)', async () => {
    const queue = queueName('self-kill');
    await defineQueue(server, queue, { maxAttempts: 1 });
    const id = await postItem(server, queue, {});
    const runs = path.join(dir, 'runs');
    const run = await work([queue, '--exec', `echo run >> ${runs}; kill -9 $$`, '--once']);
    expect(run.code).to.equal(1);
    expect(readFileSync(runs, 'utf8'), 'runs of the command').to.equal('run\n');
    expect((await getItem(server, queue, id)).error).to.include({ exitCode: null, signal: 'SIGKILL' });
  });

  it('only a line that is ::progress or starts with "::progress " is progress: "::progressive" is output like any other line (decisions §1.3)', async () => {
    const queue = queueName('progress-prefix');
    await defineQueue(server, queue);
    const id = await postItem(server, queue, {});
    const run = await work([queue, '--exec', 'echo "::progressive rock"; echo "::progress 5"', '--once']);
    expect(run.code, run.stderr).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.result).to.deep.equal({ output: '::progressive rock' });
    expect(item.progress).to.deep.equal({ percent: 5 });
  });

  it('keeps the lease alive with {} when the server refuses a progress record, so the job is claimed once (decisions §3.2)', async () => {
    const queue = queueName('badprogress');
    await defineQueue(server, queue, { leaseSeconds: 1 });
    const id = await postItem(server, queue, {});
    // A progress record larger than this server's --max-body (1 MiB): refused on every post.
    const cmd = script('job.sh', `printf '::progress {"blob":"%s"}\\n' "$(head -c 1100000 /dev/zero | tr '\\0' b)"\nsleep 3\necho done\n`);
    const run = await work([queue, '--exec', cmd, '--once']);
    expect(run.code, run.stderr).to.equal(0);
    const item = await getItem(server, queue, id);
    expect(item.status).to.equal('finished');
    expect(item.attempts).to.equal(1);
  });
});
