/**
 * `npm run bench`: the benchmark of the embedded store and its peers (bench/run.ts), or, given
 * `--store postgres://USER@HOST:PORT/DB`, the PostgreSQL benchmark (bench/postgres.ts: one node and
 * three nodes on that database beside the embedded store and pg-boss). Each reads its own options.
 * `--store URL --phases backlog-prio` runs the PostgreSQL backlog of priorities and delays instead
 * (bench/pg-backlog.ts --stages prio; its other options pass through).
 */
const args = process.argv.slice(2);
const store = args.some((a) => a === '--store' || a.startsWith('--store='));
const at = args.findIndex((a) => a === '--phases' || a.startsWith('--phases='));
const phases = at === -1 ? undefined : args[at]!.includes('=') ? args[at]!.slice('--phases='.length) : args[at + 1];
if (store && phases !== undefined) {
  if (phases !== 'backlog-prio') throw new Error(`with --store, --phases only knows backlog-prio, not "${phases}"`);
  args.splice(at, args[at]!.includes('=') ? 1 : 2, '--stages', 'prio');
  process.argv.splice(2, Infinity, ...args);
  await import('./pg-backlog.js');
} else await import(store ? './postgres.js' : './run.js');
