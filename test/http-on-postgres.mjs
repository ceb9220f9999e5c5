#!/usr/bin/env node
// `npm run test:http-postgres`: the black-box HTTP suites again, every server they start now on
// PostgreSQL (SVCQ_TEST_SERVER_STORE=postgres: one database per server root, made on the server of
// SVCQ_TEST_PG_URL and dropped after). Where no PostgreSQL answers, one line says why and it passes.
// `--jobs N` sets how many files run at once (3 unless told).
import { spawnSync } from 'node:child_process';
import pg from 'pg';

const url = process.env.SVCQ_TEST_PG_URL;
const jobsAt = process.argv.indexOf('--jobs');
const jobs = jobsAt === -1 ? '3' : process.argv[jobsAt + 1];
let whyNot;
if (!url) whyNot = 'SVCQ_TEST_PG_URL is not set';
else {
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (err) {
    whyNot = `the PostgreSQL server of SVCQ_TEST_PG_URL does not answer (${err.message})`;
  } finally {
    await client.end().catch(() => undefined);
  }
}
if (whyNot) {
  console.log(`HTTP suites on PostgreSQL: skipped: ${whyNot}`);
  process.exit(0);
}
console.log('HTTP suites on PostgreSQL: every server these tests start keeps its items and definitions in a database of its own');
// The suites whose answers depend on the store: the queue endpoints, batches and hand-ins, long
// polls, the operators' views, pausing a queue, and flow control (limits, dead letters, bulk actions). The wall, CORS, management, master-token and shutdown suites
// exercise HTTP code that is the same whatever the store (and the multi-node tests choose their
// own database and run in the main suite); `SUITES=all` runs every file.
const suites =
  process.env.SUITES === 'all'
    ? ['test/http/*.test.ts', '--ignore', 'test/http/multi-node.test.ts']
    : ['test/http/queue.test.ts', 'test/http/batch.test.ts', 'test/http/long-poll.test.ts', 'test/http/operators.test.ts', 'test/http/pause.test.ts', 'test/http/priority.test.ts', 'test/http/retries.test.ts', 'test/http/flow-control.test.ts', 'test/push/push.test.ts'];
// Each file drops the databases of its servers when it ends; a file that a worker process runs
// after another may not (the hook that drops them is registered once per process), and a crashed
// run leaves its databases too. So every database this run made carries its tag, and is dropped here.
const tag = `h${process.pid}`;
const run = spawnSync('npx', ['mocha', '--no-config', '--node-option', 'import=tsx', '--timeout', '60000', '--exit', '--forbid-only', '--parallel', '--jobs', jobs, ...suites], {
  stdio: 'inherit',
  env: { ...process.env, SVCQ_TEST_SERVER_STORE: 'postgres', SVCQ_TEST_RUN: tag },
});
const admin = new URL(url);
admin.pathname = '/postgres';
const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 3000 });
try {
  await client.connect();
  const left = await client.query("SELECT datname FROM pg_database WHERE datname LIKE $1", [`svcq\\_test\\_${tag}\\_%`]);
  for (const { datname } of left.rows) await client.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(datname)} WITH (FORCE)`);
} catch (err) {
  console.log(`HTTP suites on PostgreSQL: could not drop this run's test databases (${err.message})`);
} finally {
  await client.end().catch(() => undefined);
}
process.exit(run.status ?? 1);
