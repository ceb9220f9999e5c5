/**
 * What idle queues cost one node on PostgreSQL:
 *
 *   node --import tsx bench/idle-queues.ts <dir> [queues] [--store postgres://…/postgres]
 *
 * `dir` is a checkout with a built `dist/`. On a fresh database, defines `queues` queues (300 by
 * default; default definitions) through one node, posts one item to each, waits 5 s, then reads
 * the node's CPU (from /proc) and the database's commits over 20 s with nothing else asked of it.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

const dir = process.argv[2] ?? '.';
const n = Number(process.argv[3] ?? 300);
const at = process.argv.indexOf('--store');
const server = at > 0 ? process.argv[at + 1]! : 'postgres://postgres@127.0.0.1:5432/postgres';
const db = `svcq_idle_${process.pid}`;
const admin = new pg.Client({ connectionString: server });
await admin.connect();
await admin.query(`CREATE DATABASE ${db}`);
const url = new URL(server);
url.pathname = `/${db}`;
const master = 'idle-bench-master-token-0123456789abcdef';
const port = 47_000 + (process.pid % 900);
const proc = spawn(process.execPath, [path.join(dir, 'bin/run.js'), 'serve', '--root', path.join(os.tmpdir(), db), '--port', String(port), '--master-token', master, '--store', url.href], { stdio: ['ignore', 'pipe', 'inherit'] });
await new Promise<void>((resolve) => proc.stdout!.on('data', (c: Buffer) => String(c).includes('listening') && resolve()));

function call(method: string, p: string, body: string, host?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: host ? { host } : { authorization: `Bearer ${master}` } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const access = '{"access":{"post":"public","fetch":"public","work":"public"}}';
for (let i = 0; i < n; i++) if ((await call('PUT', `/api/v2/def?path=idle.example.com/svc-queues/q${i}.json`, access)) !== 200) throw new Error('a definition was refused');
for (let i = 0; i < n; i++) if ((await call('POST', `/q${i}`, '{"n":1}', 'idle.example.com')) !== 200) throw new Error('a post was refused');
await new Promise((r) => setTimeout(r, 5000));
const cpuTicks = (): number => readFileSync(`/proc/${proc.pid}/stat`, 'utf8').split(' ').slice(13, 15).reduce((a, b) => a + Number(b), 0);
const commits = async (): Promise<number> => Number((await admin.query<{ c: string }>('SELECT xact_commit AS c FROM pg_stat_database WHERE datname = $1', [db])).rows[0]!.c);
const [c0, x0, t0] = [cpuTicks(), await commits(), Date.now()];
await new Promise((r) => setTimeout(r, 20_000));
const [c1, x1, t1] = [cpuTicks(), await commits(), Date.now()];
const seconds = (t1 - t0) / 1000;
console.log(`${dir}: ${n} idle queues, one item each: node CPU ${(((c1 - c0) / 100 / seconds) * 100).toFixed(1)}% of a core, ${((x1 - x0) / seconds).toFixed(1)} commits/s`);
proc.kill('SIGTERM');
await new Promise((r) => proc.on('exit', r));
await admin.query(`DROP DATABASE ${db}`);
await admin.end();
