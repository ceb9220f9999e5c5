import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { parseTaskFile } from '../../src/tools/files.js';
import { request } from '../support/http.js';
import { BIN, REPO, tempDirEachTest } from '../support/server.js';

/**
 * A power cut keeps what the page cache held only once it is synced: a file created, renamed or
 * removed is there after the cut only once the folder naming it is synced too. These tests run a
 * real server under strace and read, from the system calls it made, that every entry it changed
 * under its root was followed by an fsync of its folder before the answer that relied on it.
 */
describe('every folder entry the server makes is synced before it is relied on (durable through a power cut)', function () {
  this.timeout(120_000);
  let dir = '';
  tempDirEachTest((d) => (dir = d), 'svcq-entries-');

  before(function () {
    const probe = spawnSync('strace', ['-f', '-o', '/dev/null', 'true'], { encoding: 'utf8' });
    if (probe.error || probe.status !== 0) {
      console.log(`      skipped: strace cannot trace here (${probe.error?.message ?? probe.stderr.trim()})`);
      this.skip();
    }
  });

  it('a first start, a definition PUT, posts with archived payloads and a restart: each created, renamed or removed entry is followed by an fsync of its folder before the next answer (the ready line, an HTTP answer) and a new task-history day-file before the history position moves on', async () => {
    const root = path.join(dir, 'root');
    // First start: no token given, so the server makes its own file.
    const first = await traced(root, path.join(dir, 'first.trace'));
    const master = readFileSync(path.join(root, '_svcq', 'master-token'), 'utf8').trim();
    const host = { host: 'jobs.example.com' };
    const put = await request(first.url, '/api/v2/def?path=jobs.example.com/svc-queues/echo.json', {
      method: 'PUT',
      headers: { authorization: `Bearer ${master}` },
      body: JSON.stringify({ access: { post: 'public', fetch: 'public', work: 'public' }, 'svc-queue-archivePayloads': true }),
    });
    expect(put.status, put.text).to.equal(200);
    for (let i = 0; i < 3; i++) {
      const posted = await request(first.url, '/echo', { method: 'POST', headers: host, body: JSON.stringify({ n: i }) });
      expect(posted.status, posted.text).to.be.oneOf([200, 201, 202]);
    }
    await first.stop();
    const second = await traced(root, path.join(dir, 'second.trace'));
    const posted = await request(second.url, '/echo', { method: 'POST', headers: host, body: JSON.stringify({ n: 3 }) });
    expect(posted.status, posted.text).to.be.oneOf([200, 201, 202]);
    await second.stop();

    const calls = parseTrace(['first', 'second'].map((run) => readFileSync(path.join(dir, `${run}.trace`), 'utf8')).join('\n'));
    const changes = entryChanges(calls, root);
    // The test sees what it must: the root, _svcq, the token, the store, the task history, a definition and archived payloads.
    for (const must of ['', '_svcq', '_svcq/master-token', '_svcq/store', '_svcq/tasks', 'jobs.example.com/svc-queues', '_svcq/payloads/jobs.example.com/echo']) {
      expect(changes.some((c) => path.relative(root, c.entry) === must || path.relative(root, path.dirname(c.entry)) === must), `an entry made in or as ${must || 'the root'}`).to.equal(true);
    }
    expect(unsynced(calls, changes, root)).to.deep.equal([]);
  });

  it('the check fails on an entry left unsynced (a file created under the root with no fsync of its folder before the next answer)', async () => {
    const root = path.join(dir, 'root');
    const trace = [
      `1 mkdir("${root}", 0777) = 0`,
      `1 fsync(5<${dir}>) = 0`,
      `1 openat(AT_FDCWD<${dir}>, "${root}/_svcq/master-token", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600) = 6<${root}/_svcq/master-token>`,
      `1 write(1<pipe:[1]>, "listening on http://127.0.0.1:1\\n", 33) = 33`,
      `1 fsync(7<${root}/_svcq>) = 0`,
    ].join('\n');
    const calls = parseTrace(trace);
    expect(unsynced(calls, entryChanges(calls, root), root)).to.deep.equal([`${root}/_svcq/master-token (openat) before "listening on http://127.0.0.1:1\\n"`]);
  });
});

/** One system call: its name, its text (arguments and result) and the lines where it began and ended. */
interface Call {
  name: string;
  text: string;
  start: number;
  end: number;
}

/** The calls of an `strace -f` log, a call split by another thread's ("<unfinished ...>", "<... resumed>") put back together. */
function parseTrace(log: string): Call[] {
  const calls: Call[] = [];
  const open = new Map<string, { name: string; text: string; start: number }>();
  log.split('\n').forEach((line, at) => {
    const m = /^(\d+)\s+(.*)$/.exec(line);
    if (!m) return;
    const [, pid, rest] = m as unknown as [string, string, string];
    const resumed = /^<\.\.\. (\w+) resumed>(.*)$/.exec(rest);
    if (resumed) {
      const begun = open.get(pid);
      open.delete(pid);
      if (begun) calls.push({ name: begun.name, text: begun.text + resumed[2], start: begun.start, end: at });
      return;
    }
    const call = /^(\w+)\((.*)$/.exec(rest);
    if (!call) return;
    if (rest.endsWith('<unfinished ...>')) open.set(pid, { name: call[1]!, text: call[2]!.slice(0, -'<unfinished ...>'.length).trimEnd(), start: at });
    else calls.push({ name: call[1]!, text: call[2]!, start: at, end: at });
  });
  return calls;
}

interface Change {
  /** The entry made, renamed or removed (an absolute path). */
  entry: string;
  call: Call;
}

/** The paths a call names as strings, in order. */
function quoted(text: string): string[] {
  return [...text.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
}

/** The successful calls that create, rename or remove an entry under `root` (the root itself included). */
function entryChanges(calls: Call[], root: string): Change[] {
  const out: Change[] = [];
  for (const call of calls) {
    if (/= -1 /.test(call.text)) continue;
    let entries: string[] = [];
    if (call.name === 'mkdir' || call.name === 'unlink' || call.name === 'rmdir') entries = quoted(call.text).slice(0, 1);
    else if (call.name === 'mkdirat' || call.name === 'unlinkat') entries = quoted(call.text).slice(0, 1);
    else if (call.name === 'rename' || call.name === 'renameat' || call.name === 'renameat2') entries = quoted(call.text).slice(0, 2);
    else if ((call.name === 'openat' || call.name === 'open' || call.name === 'creat') && (call.name === 'creat' || /O_CREAT/.test(call.text))) entries = quoted(call.text).slice(0, 1);
    for (const entry of entries) {
      if (!path.isAbsolute(entry)) throw new Error(`a relative path in the trace: ${call.name}(${call.text})`);
      if (entry === root || entry.startsWith(root + path.sep)) out.push({ entry, call });
    }
  }
  return out;
}

/**
 * The entries not synced in time, each as "PATH (call) before WHAT". An entry's folder must be
 * fsynced after the change and before what relies on it: a new task-history day-file, before the
 * history's position is next written (its records are the store's, written there in the
 * background); every other entry, before the next answer the server gives (an HTTP answer, its
 * ready line). Access logs and stats are left out: their lines are not synced either (a power cut
 * may take their last seconds), and no answer relies on them.
 */
function unsynced(calls: Call[], changes: Change[], root: string): string[] {
  const bestEffort = [path.join(root, '_svcq', 'logs'), path.join(root, '_svcq', 'stats')];
  const answers = calls.filter((c) => (c.name === 'write' || c.name === 'writev') && (/^\d+<TCP(v6)?:\[[^\]]*\]>, \[?\{?(iov_base=)?"HTTP\/1\.1 /.test(c.text) || /^1<.*?>, "listening on /.test(c.text)));
  const positions = calls.filter((c) => /^(p?write(64|v)?)$/.test(c.name) && c.text.includes(`${path.join(root, '_svcq', 'tasks', 'position.json')}>`));
  const syncs = calls.filter((c) => c.name === 'fsync' && !/= -1 /.test(c.text));
  const late: string[] = [];
  for (const change of changes) {
    const folder = path.dirname(change.entry);
    if (bestEffort.some((d) => folder === d || folder.startsWith(d + path.sep))) continue;
    const dayFile = folder === path.join(root, '_svcq', 'tasks') && parseTaskFile(path.basename(change.entry)) !== undefined;
    const next = (dayFile ? positions : answers).find((c) => c.start > change.call.end);
    const synced = syncs.some((s) => s.text.startsWith(`${/^\d+/.exec(s.text)![0]}<${folder}>)`) && s.start > change.call.end && (next === undefined || s.end < next.start));
    if (!synced) late.push(`${change.entry} (${change.call.name}) before ${next ? `"${(quoted(next.text)[0] ?? next.name).slice(0, 40)}"` : 'the end'}`);
  }
  return late;
}

/** `svcq serve` under `strace -f`, writing its trace to `file`, started on `root`; stopped with SIGTERM. */
async function traced(root: string, file: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const args = ['-f', '-qq', '-yy', '-s', '48', '-o', file, '-e', 'trace=%file,fsync,fdatasync,write,writev,pwrite64', '--', process.execPath, BIN, 'serve', '--root', root, '--port', '0'];
  // libuv's io_uring would take file calls past strace; Node 20 leaves it off, and so does this.
  const env: NodeJS.ProcessEnv = { ...process.env, UV_USE_IO_URING: '0' };
  delete env.SVCQ_MASTER_TOKEN;
  const proc = spawn('strace', args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    proc.stdout.on('data', () => {
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`the server under strace ended with ${code} before listening:\n${out}`)));
  });
  return {
    url,
    stop: async () => {
      // The server is strace's child, the first process its trace names; strace ends with it.
      process.kill(Number(/^\d+/.exec(readFileSync(file, 'utf8'))![0]), 'SIGTERM');
      await exited;
      writeFileSync(`${file}.out`, out);
    },
  };
}
