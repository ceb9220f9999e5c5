#!/usr/bin/env node
// `npm test`: the type-check and the lint beside every test file, then the HTTP suites on
// PostgreSQL (test/http-on-postgres.mjs). Most of the suite's time is spent waiting on the clock
// its tests are about (leases, give-ups, retries, a server's grace), not computing: what the
// type-check and the lint compute fits in that wait, and mocha runs five files at once
// (.mocharc.json). The test files go to mocha's workers longest first (the list below, measured
// on this machine), so that no long file starts last and runs on alone while the other workers
// stand idle; every other file follows in name order. The type-check and the lint print what they
// said once the test files are done, so that their lines do not fall among mocha's.
//
// The HTTP suites on PostgreSQL come after, not beside: every server they start holds up to nine
// connections, and with the test files' own servers and stores (three nodes in some) they would
// pass PostgreSQL's 100 (max_connections) at times. For the same reason the files that start
// three nodes on one database are far apart in the list below, so that they seldom run at once.
//
// Arguments are passed on to mocha (`node test/run.mjs --jobs 4`).
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The slowest files first, slowest at the top: each takes tens of seconds of its own
 * (docs/performance.md). The three files that run three nodes on one database (multi-node,
 * multi-node-schedules, multi-node-limits) and push-nodes are kept apart.
 */
const LONGEST = [
  'test/store/conformance.test.ts',
  'test/commands/producer.test.ts',
  'test/worker/faults.test.ts',
  'test/http/multi-node-schedules.test.ts',
  'test/store/model-based-postgres.test.ts',
  'test/commands/way-in.test.ts',
  'test/http/long-poll.test.ts',
  'test/push/callbacks.test.ts',
  'test/push/push.test.ts',
  'test/commands/item-wait.test.ts',
  'test/store/model-based.test.ts',
  'test/http/multi-node.test.ts',
  'test/commands/sync.test.ts',
  'test/store/postgres-store.test.ts',
  'test/worker/work.test.ts',
  'test/store/crash.test.ts',
  'test/examples.test.ts',
  'test/store/postgres-limits.test.ts',
  'test/client/work.test.ts',
  'test/http/multi-node-limits.test.ts',
  'test/store/postgres-notifier.test.ts',
  'test/commands/top.test.ts',
  'test/client/library.test.ts',
  'test/store/disk-full.test.ts',
  'test/commands/follow.test.ts',
  'test/http/shutdown.test.ts',
  'test/push/push-nodes.test.ts',
];

/**
 * Runs a command; resolves with its exit code and what it printed on stdout (and on stderr, when
 * `quiet`). Unless `quiet`, what it prints is passed on as it comes.
 */
function run(command, args, quiet) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: repo, stdio: quiet ? ['ignore', 'pipe', 'pipe'] : ['inherit', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
      if (!quiet) process.stdout.write(c);
    });
    if (quiet) child.stderr.on('data', (c) => (out += c));
    child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), out }));
  });
}

const bin = (name) => path.join(repo, 'node_modules', '.bin', name);
const started = Date.now();
const seconds = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;

const all = readdirSync(path.join(repo, 'test'), { recursive: true })
  .filter((f) => f.endsWith('.test.ts'))
  .map((f) => path.posix.join('test', f.split(path.sep).join('/')))
  .sort();
const missing = LONGEST.filter((f) => !all.includes(f));
if (missing.length > 0) {
  console.error(`npm test: test/run.mjs names files that are not there: ${missing.join(', ')}`);
  process.exit(1);
}
const files = [...LONGEST, ...all.filter((f) => !LONGEST.includes(f))];

const checks = Promise.all([run(bin('tsc'), ['-p', 'tsconfig.json', '--noEmit'], true), run(bin('eslint'), ['.'], true)]).then((results) => ({ results, at: seconds() }));
const mocha = await run(bin('mocha'), [...process.argv.slice(2), ...files], false);
console.log(`test files done (${seconds()})`);

let failed = mocha.code !== 0;
const { results, at } = await checks;
for (const [name, result] of [['type-check', results[0]], ['lint', results[1]]]) {
  if (result.code === 0) continue;
  process.stdout.write(result.out);
  console.error(`npm test: the ${name} failed`);
  failed = true;
}
if (results.every((r) => r.code === 0)) console.log(`type-check and lint passed (${at})`);
const onPostgres = await run(process.execPath, [path.join(repo, 'test', 'http-on-postgres.mjs')], false);
failed ||= onPostgres.code !== 0;
// A log kept only by its tail still names what failed: mocha's list of failures is printed again last.
for (const [name, result] of [['test files', mocha], ['HTTP suites on PostgreSQL', onPostgres]]) {
  const at = result.out.search(/^\s*\d+ failing/m);
  if (result.code !== 0 && at !== -1) console.log(`\nnpm test: what failed in the ${name}, again:\n${result.out.slice(at)}`);
}
console.log(`npm test: ${failed ? 'failed' : 'passed'} in ${seconds()}`);
process.exit(failed ? 1 : 0);
