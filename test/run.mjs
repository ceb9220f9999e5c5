#!/usr/bin/env node
// `npm test`: the type-check and the lint side by side, then every test file, then the HTTP suites
// on PostgreSQL (test/http-on-postgres.mjs). The test files go to mocha's workers longest first
// (the list below, measured on this machine), so that no long file starts last and runs on alone
// while the other workers stand idle; every other file follows in name order.
//
// Arguments are passed on to mocha (`node test/run.mjs --jobs 4`).
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The slowest files first, slowest at the top: each takes tens of seconds of its own. */
const LONGEST = [
  'test/store/model-based.test.ts',
  'test/worker/faults.test.ts',
  'test/commands/producer.test.ts',
  'test/commands/item-wait.test.ts',
  'test/worker/work.test.ts',
  'test/http/multi-node.test.ts',
  'test/http/multi-node-schedules.test.ts',
  'test/http/long-poll.test.ts',
  'test/store/crash.test.ts',
  'test/examples.test.ts',
  'test/scaling-doc.test.ts',
  'test/http/protocol.test.ts',
  'test/client/faults.test.ts',
  'test/client/library.test.ts',
  'test/client/work.test.ts',
  'test/http/shutdown.test.ts',
  'test/store/postgres-notifier.test.ts',
  'test/http/flow-control.test.ts',
  'test/store/postgres-limits.test.ts',
  'test/push/push.test.ts',
  'test/push/push-nodes.test.ts',
];

/** Runs a command; resolves with its exit code and, when `quiet`, what it printed. */
function run(command, args, quiet) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: repo, stdio: quiet ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let out = '';
    if (quiet) {
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
    }
    child.on('exit', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), out }));
  });
}

const bin = (name) => path.join(repo, 'node_modules', '.bin', name);
const started = Date.now();
const seconds = () => `${((Date.now() - started) / 1000).toFixed(0)} s`;

const checks = await Promise.all([run(bin('tsc'), ['-p', 'tsconfig.json', '--noEmit'], true), run(bin('eslint'), ['.'], true)]);
for (const [name, result] of [['type-check', checks[0]], ['lint', checks[1]]]) {
  if (result.code !== 0) {
    process.stdout.write(result.out);
    console.error(`npm test: the ${name} failed (${seconds()})`);
    process.exit(1);
  }
}
console.log(`type-check and lint passed (${seconds()})`);

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
const mocha = await run(bin('mocha'), [...process.argv.slice(2), ...files], false);
const onPostgres = await run(process.execPath, [path.join(repo, 'test', 'http-on-postgres.mjs')], false);
console.log(`npm test: ${mocha.code === 0 && onPostgres.code === 0 ? 'passed' : 'failed'} in ${seconds()}`);
process.exit(mocha.code || onPostgres.code);
