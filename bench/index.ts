/**
 * `npm run bench`: the benchmark of the embedded store and its peers (bench/run.ts), or, given
 * `--store postgres://USER@HOST:PORT/DB`, the PostgreSQL benchmark (bench/postgres.ts: one node and
 * three nodes on that database beside the embedded store and pg-boss). Each reads its own options.
 */
const store = process.argv.slice(2).some((a) => a === '--store' || a.startsWith('--store='));
await import(store ? './postgres.js' : './run.js');
