import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { migratedDatabase } from '../store/support/stores.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = path.join(REPO, 'bin/run.js');

/** A fresh temp folder, removed by `cleanupTemp`. */
export function tempDir(prefix = 'svcq-test-'): string {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

export function cleanupTemp(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Gives each test of the enclosing `describe` a fresh temp directory (`use` gets it before the
 * test) and removes it after the test, whatever became of it.
 */
export function tempDirEachTest(use: (dir: string) => void, prefix?: string): void {
  let dir = '';
  beforeEach(() => {
    dir = tempDir(prefix);
    use(dir);
  });
  afterEach(() => cleanupTemp(dir));
}

export interface TestServer {
  url: string;
  port: number;
  root: string;
  masterToken: string;
  proc: ChildProcess;
  /** Everything the server printed so far. */
  output(): string;
  /** SIGTERM (or another signal) and wait for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** kill -9: no flush, no goodbye. */
  kill9(): Promise<void>;
}

export interface StartOptions {
  root?: string;
  masterToken?: string;
  /** Extra `svcq serve` flags. */
  args?: string[];
  env?: Record<string, string>;
  port?: number;
  /** Run from the TypeScript sources (bin/dev.js under tsx) instead of the built binary. */
  fromSources?: boolean;
}

/**
 * With SVCQ_TEST_SERVER_STORE=postgres, every server a test starts keeps its items in a PostgreSQL
 * database of its own, made on the server of SVCQ_TEST_PG_URL: one per root, so that a restart on
 * the same root (after a kill -9, say) finds them again. They are dropped when the tests end. Each
 * starts as a copy of a database the migrations made (`migratedDatabase`): the servers' own
 * migrations from nothing are tested where a test chooses its database (the multi-node suites).
 * This is how the black-box HTTP suites run against each store (`npm run test:http-postgres`).
 */
const databases = new Map<string, { url: string; drop: () => Promise<void> }>();
export const SERVER_STORE = process.env.SVCQ_TEST_SERVER_STORE === 'postgres' ? 'postgres' : 'embedded';
if (SERVER_STORE === 'postgres' && typeof after === 'function') {
  after(async () => {
    for (const db of databases.values()) await db.drop().catch(() => undefined);
    databases.clear();
  });
}

/**
 * For a test that looks at the embedded store's files (definitions as files under the root): on a
 * server whose definitions live in PostgreSQL it is skipped, saying why in one visible line.
 */
export function filesUnderRootOnly(test: Mocha.Context, what: string): void {
  if (SERVER_STORE !== 'postgres') return;
  console.log(`      skipped on PostgreSQL: ${what}`);
  test.skip();
}

async function storeArgs(root: string, args: string[]): Promise<string[]> {
  if (SERVER_STORE !== 'postgres' || args.includes('--store')) return [];
  const base = process.env.SVCQ_TEST_PG_URL;
  if (!base) throw new Error('SVCQ_TEST_SERVER_STORE=postgres needs SVCQ_TEST_PG_URL');
  let db = databases.get(root);
  if (!db) {
    db = await migratedDatabase(base);
    databases.set(root, db);
  }
  return ['--store', db.url];
}

/** Spawns a real `svcq serve` (the built binary) on a temp root and waits for its `listening on` line. */
export async function startServer(options: StartOptions = {}): Promise<TestServer> {
  const root = options.root ?? tempDir();
  const store = await storeArgs(root, options.args ?? []);
  const masterToken = options.masterToken ?? 'master-test-token-0123456789abcdef';
  const entry = options.fromSources ? ['--import', 'tsx', '--no-warnings', path.join(REPO, 'bin/dev.js')] : [BIN];
  const proc = spawn(process.execPath, [...entry, 'serve', '--root', root, '--port', String(options.port ?? 0), '--master-token', masterToken, ...store, ...(options.args ?? [])], {
    cwd: REPO,
    // No server-health samples unless a test asks for them (--stats-interval): each takes a
    // third of a server's start in CPU, on a thread of its own, for day-files no other test reads.
    env: { SVCQ_STATS_INTERVAL: '0', ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start within 20 s:\n${out}`)), 20_000);
    const check = (): void => {
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    proc.stdout!.on('data', check);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${out}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    root,
    masterToken,
    proc,
    output: () => out,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill(signal);
      return exited;
    },
    async kill9() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * One server for the tests of the calling `describe`: started before them, stopped after them,
 * its root removed. The returned object is filled in by the `before` hook.
 */
export function serverForSuite(options: StartOptions = {}): TestServer {
  const server = {} as TestServer;
  before(async () => {
    Object.assign(server, await startServer(options));
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });
  return server;
}
