import { mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import Serve from '../../commands/serve.js';
import { defineQueue, PUBLIC_ACCESS, putDef } from '../http/queue-api.js';
import { request } from '../support/http.js';
import { runCli } from '../support/cli.js';
import { cleanupTemp, startServer, tempDir } from '../support/server.js';

describe('svcq serve flags (decisions §1.1)', () => {
  it('every flag has its environment variable: SVCQ_ and the name in capitals, - as _ (decisions §1.1)', () => {
    const names = Object.keys(Serve.flags);
    expect(names).to.include.members(['root', 'port', 'bind', 'master-token', 'shutdown-grace', 'log-max-bytes']);
    for (const name of names) {
      const flag = Serve.flags[name as keyof typeof Serve.flags] as { env?: string };
      expect(flag.env, `--${name}`).to.equal(`SVCQ_${name.toUpperCase().replaceAll('-', '_')}`);
    }
  });

  it('takes a flag from its environment variable (SVCQ_SHOW_TOKEN, SVCQ_LOG_KEEP) (decisions §1.1)', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const server = await startServer({ root, env: { SVCQ_SHOW_TOKEN: 'true', SVCQ_SHUTDOWN_GRACE: '1' } });
    try {
      expect(server.output()).to.include(`master token: ${server.masterToken}`);
    } finally {
      expect(await server.stop()).to.equal(0);
      cleanupTemp(root);
    }
    const bad = await runCli(['serve', '--root', root], { env: { SVCQ_LOG_KEEP: 'many' } });
    expect(bad.code).to.not.equal(0);
    expect(bad.stderr).to.match(/log-keep/);
  });
});

describe('svcq serve --push-allow (decisions §9)', () => {
  it('takes prefixes from the flag, repeated, and from SVCQ_PUSH_ALLOW, comma-separated; a definition naming a URL outside them is a 400 naming it', async function () {
    this.timeout(30_000);
    for (const [args, env] of [[['--push-allow', 'http://a.test/', '--push-allow', 'http://127.0.0.1:9/'], {}], [[], { SVCQ_PUSH_ALLOW: 'http://a.test/,http://127.0.0.1:9/' }]] as const) {
      const root = tempDir();
      const server = await startServer({ root, args: [...args], env: { ...env } });
      try {
        await putDef(server, 'localhost/svc-queues/allowed.json', { push: { url: 'http://127.0.0.1:9/jobs' }, callback: 'http://a.test/done' });
        const put = await request(server.url, '/api/v2/def?path=localhost/svc-queues/outside.json', { method: 'PUT', token: server.masterToken, body: JSON.stringify({ push: { url: 'http://127.0.0.2:9/jobs' } }) });
        expect(put.status).to.equal(400);
        expect((put.json as { error: string }).error).to.include('push.url "http://127.0.0.2:9/jobs" is not a URL this server may call');
      } finally {
        expect(await server.stop()).to.equal(0);
        cleanupTemp(root);
      }
    }
  });

  it('refuses to start, in one sentence naming the prefix, when a prefix is not an http(s) URL', async () => {
    const root = tempDir();
    const bad = await runCli(['serve', '--root', root, '--port', '0', '--push-allow', 'hooks.example.com']);
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.equal('svcq: cannot start: --push-allow "hooks.example.com" is not an absolute http:// or https:// URL prefix\n');
    cleanupTemp(root);
  });
});

describe('svcq serve --history-days (decisions §5: the task history outlives retention unless capped)', () => {
  it('removes the task-history day-files of days more than N days past at start, and keeps today\'s', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const tasks = path.join(root, '_svcq', 'tasks');
    let server = await startServer({ root });
    try {
      await defineQueue(server, 'history.example.com', 'kept', { access: PUBLIC_ACCESS });
      expect((await request(server.url, '/kept', { method: 'POST', host: 'history.example.com', body: '{}' })).status).to.equal(200);
      expect(await server.stop()).to.equal(0);
      const today = `tasks-${new Date().toISOString().slice(0, 10)}.log`;
      writeFileSync(path.join(tasks, 'tasks-2020-01-01.log'), '{}\n');
      writeFileSync(path.join(tasks, 'tasks-2020-01-02.log'), '{}\n');
      server = await startServer({ root, env: { SVCQ_HISTORY_DAYS: '2' } });
      const deadline = Date.now() + 10_000;
      while (readdirSync(tasks).some((n) => n.startsWith('tasks-2020')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(tasks).filter((n) => n.startsWith('tasks-'))).to.deep.equal([today]);
    } finally {
      await server.stop();
      cleanupTemp(root);
    }
  });
});

describe('svcq serve --stats-days (decisions §5: stats day-files, one per type and UTC day, kept unless capped)', () => {
  it('removes the stats day-files of days more than N days past at start, and keeps today\'s', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const stats = path.join(root, '_svcq', 'stats');
    mkdirSync(stats, { recursive: true });
    writeFileSync(path.join(stats, 'cpu-2020-01-01.log'), '{}\n');
    writeFileSync(path.join(stats, 'memory-2020-01-02.log'), '{}\n');
    const server = await startServer({ root, env: { SVCQ_STATS_DAYS: '2', SVCQ_STATS_INTERVAL: '3600000' } });
    try {
      const today = new Date().toISOString().slice(0, 10);
      const deadline = Date.now() + 10_000;
      const done = (): boolean => !readdirSync(stats).some((n) => n.includes('2020-')) && readdirSync(stats).includes(`cpu-${today}.log`);
      while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(stats).filter((n) => n.includes('2020-'))).to.deep.equal([]);
      expect(readdirSync(stats)).to.include(`cpu-${today}.log`);
    } finally {
      await server.stop();
      cleanupTemp(root);
    }
  });
});

describe('svcq serve: what it writes under --root', () => {
  it('is readable by the server\'s own user alone: every folder 0700, every file 0600 (items, payloads, definitions, logs, history)', async function () {
    this.timeout(30_000);
    const parent = tempDir();
    const root = path.join(parent, 'root');
    const server = await startServer({ root });
    try {
      await defineQueue(server, 'modes.example.com', 'q', { access: PUBLIC_ACCESS, 'svc-queue-archivePayloads': true });
      const posted = await request(server.url, '/q', { method: 'POST', host: 'modes.example.com', body: '{"secret":"s3cr3t"}' });
      expect(posted.status).to.equal(200);
      // The access log and the task history are written within 100 ms.
      await new Promise((r) => setTimeout(r, 400));
    } finally {
      expect(await server.stop()).to.equal(0);
    }
    const loose: string[] = [];
    const kinds = new Set<string>();
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const full = path.join(dir, name);
        const st = statSync(full);
        kinds.add(path.relative(root, full).split(path.sep).slice(0, 2).join('/'));
        if ((st.mode & 0o077) !== 0) loose.push(`${(st.mode & 0o777).toString(8)} ${path.relative(root, full)}`);
        if (st.isDirectory()) walk(full);
      }
    };
    expect((statSync(root).mode & 0o777).toString(8)).to.equal('700');
    walk(root);
    expect(loose).to.deep.equal([]);
    // What was looked at: the store, the definitions, the payload archive, the logs and the history.
    expect([...kinds]).to.include.members(['_svcq/store', 'modes.example.com/svc-queues', '_svcq/payloads', '_svcq/logs', '_svcq/tasks']);
    cleanupTemp(parent);
  });
});

describe('durations a timer would wait on (Node timers hold at most 2^31 − 1 ms; past that they fire after 1 ms)', () => {
  it('refuses, naming the flag, a duration longer than a timer can wait, rather than firing at once: serve --stats-interval, work --timeout, top --interval', async function () {
    this.timeout(30_000);
    const root = tempDir();
    const cases: Array<[string[], RegExp]> = [
      [['serve', '--root', root, '--stats-interval', '3000000000'], /--stats-interval/],
      [['work', 'q', '--exec', 'true', '--timeout', '3000000'], /--timeout/],
      [['top', '--interval', '3000000'], /--interval/],
    ];
    for (const [args, flag] of cases) {
      const r = await runCli(args, { timeoutMs: 10_000 });
      expect(r.code, args.join(' ')).to.equal(2);
      expect(r.stderr, args.join(' ')).to.match(flag).and.to.match(/less than or equal to/);
    }
    cleanupTemp(root);
  });
});
