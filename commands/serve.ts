import { Command, Flags } from '@oclif/core';
import { startServerThread } from '../src/http/server-thread.js';
import { keepOutputErrorsQuiet, stderrLine } from '../src/server-output.js';

/** What a stop may take beyond the grace period, to flush the store and the tools. */
const STOP_MARGIN_S = 10;

export default class Serve extends Command {
  static override summary = 'Run the svcq server.';
  static override description = `Serves the queues of every defined host, the management API and the tools API.
With the embedded store, everything the server keeps lives under --root: definitions in <root>/<host>/svc-*, everything else in <root>/_svcq/.
With --store postgres://..., definitions, items, task events and archived payloads live in the database, and --root holds this server's access logs, stats and task-history day-files.
The master token comes from --master-token, SVCQ_MASTER_TOKEN, or <root>/_svcq/master-token (created with mode 0600 on first start).
Every flag can also be set in the environment: SVCQ_ and the flag's name in capitals, with _ for - (SVCQ_ROOT, SVCQ_LOG_MAX_BYTES, ...).
One SIGINT or SIGTERM stops it: held long polls are answered at once, requests under way finish, keep-alive connections close, a connection that has not delivered a whole request within --shutdown-grace is cut, everything is flushed, and it exits 0. A second signal exits at once (130).`;
  static override examples = ['<%= config.bin %> serve --root ./data', '<%= config.bin %> serve --root ./data --port 0 --show-token'];

  static override flags = {
    root: Flags.string({ description: 'folder that holds definitions, items, logs and stats (with --store postgres://..., only the access logs, stats and task history of this server)', env: 'SVCQ_ROOT', default: './data' }),
    port: Flags.integer({ description: 'TCP port (0 picks a free one)', env: 'SVCQ_PORT', default: 8080, min: 0, max: 65535 }),
    bind: Flags.string({ description: 'address to listen on', env: 'SVCQ_BIND', default: '127.0.0.1' }),
    'master-token': Flags.string({ description: 'master token for /api (default: SVCQ_MASTER_TOKEN, else <root>/_svcq/master-token)', env: 'SVCQ_MASTER_TOKEN' }),
    'replace-master-token': Flags.boolean({ description: 'with --store postgres://...: record this server\'s master token as the one every node of the database must use, in place of the one recorded (the first node records its own; a node with another is refused)', env: 'SVCQ_REPLACE_MASTER_TOKEN', default: false }),
    'show-token': Flags.boolean({ description: 'print the master token at start', env: 'SVCQ_SHOW_TOKEN', default: false }),
    'max-body': Flags.integer({ description: 'largest request body in bytes', env: 'SVCQ_MAX_BODY', default: 1024 * 1024, min: 1024 }),
    'log-max-bytes': Flags.integer({ description: 'rotate the access log once it passes this many bytes', env: 'SVCQ_LOG_MAX_BYTES', default: 16 * 1024 * 1024, min: 1 }),
    'log-keep': Flags.integer({ description: 'rotated access logs to keep', env: 'SVCQ_LOG_KEEP', default: 20, min: 0 }),
    'stats-interval': Flags.integer({ description: 'milliseconds between server-health samples, at least 100 (0: take none; stats now still answers)', env: 'SVCQ_STATS_INTERVAL', default: 15_000, min: 0, max: 2 ** 31 - 1 }),
    'history-days': Flags.integer({ description: 'remove task-history day-files of days more than N days past, at start and once an hour (default 0: keep every one)', env: 'SVCQ_HISTORY_DAYS', default: 0, min: 0, max: 1_000_000 }),
    'stats-days': Flags.integer({ description: 'remove stats day-files of days more than N days past, at start and once a day (default 0: keep every one)', env: 'SVCQ_STATS_DAYS', default: 0, min: 0, max: 1_000_000 }),
    'compact-bytes': Flags.integer({ description: 'journal size in bytes past which the store writes a snapshot (and at least four times the last snapshot)', env: 'SVCQ_COMPACT_BYTES', default: 64 * 1024 * 1024, min: 1024 }),
    store: Flags.string({ description: 'where items live: "embedded" (under --root) or postgres://USER@HOST:PORT/DB, shared by every server started with it and the same master token', env: 'SVCQ_STORE', default: 'embedded' }),
    'push-allow': Flags.string({
      description: 'a URL prefix (scheme, host, port and path start, e.g. https://hooks.example.com/) that push queues and callbacks may call; repeat it for more (SVCQ_PUSH_ALLOW: comma-separated). With none, the server calls no URL',
      env: 'SVCQ_PUSH_ALLOW',
      multiple: true,
    }),
    'shutdown-grace': Flags.integer({ description: 'seconds a connection may take, once a stop begins, to deliver a whole request before it is cut', env: 'SVCQ_SHUTDOWN_GRACE', default: 5, min: 0, max: 3600 }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(Serve);
    const statsInterval = flags['stats-interval'];
    if (statsInterval > 0 && statsInterval < 100) this.error(`Parsing --stats-interval\n\tExpected 0 (no samples) or an integer greater than or equal to 100 but received: ${statsInterval}`, { exit: 2 });
    // Installed before anything starts, and for the life of the process: a signal that arrives
    // while the server starts still stops it cleanly, and a library that watches signals (and
    // re-raises one when it sees no other listener) never finds ours gone.
    let signals = 0;
    let onStop: () => void = () => {};
    const stopRequested = new Promise<void>((resolve) => (onStop = resolve));
    const onSignal = (): void => {
      signals += 1;
      if (signals === 1) onStop();
      // A second signal while stopping ends the process at once.
      else process.exit(130);
    };
    const graceMs = flags['shutdown-grace'] * 1000;
    // Everything the server creates under --root (items, results, payloads, definitions, logs) is
    // readable by its own user alone, as PostgreSQL keeps its data directory.
    process.umask(0o077);
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // A log that cannot be written (stderr on a disk that filled, a reader gone) does not end the server.
    keepOutputErrorsQuiet();
    let server;
    try {
      server = await startServerThread(
        { root: flags.root, port: flags.port, bind: flags.bind, masterToken: flags['master-token'], replaceMasterToken: flags['replace-master-token'], maxBody: flags['max-body'], logMaxBytes: flags['log-max-bytes'], logKeep: flags['log-keep'], statsInterval, historyDays: flags['history-days'], statsDays: flags['stats-days'], compactBytes: flags['compact-bytes'], shutdownGraceMs: graceMs, store: flags.store, pushAllow: pushAllowOf(flags['push-allow']) },
        (err) => {
          // The server stopped on its own (a bug): say why, with the stack, and end the process as an uncaught error would.
          stderrLine(`svcq: the server stopped: ${err.stack ?? err.message}`);
          process.exit(1);
        },
      );
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      const why = e.code === 'EADDRINUSE' ? `port ${flags.port} on ${flags.bind} is already in use` : e.code === 'EACCES' ? `permission denied (${e.message})` : e.message;
      // One sentence, as every command says what went wrong (decisions §1.2).
      process.stderr.write(`svcq: cannot start: ${why}\n`);
      this.exit(1);
    }
    if (server.masterTokenFile) this.log(`master token in ${server.masterTokenFile}${server.masterTokenCreated ? ' (new)' : ''}`);
    if (flags['show-token']) this.log(`master token: ${server.masterToken}`);
    this.log(`listening on ${server.url}`);

    await stopRequested;
    // Clients cannot hold the stop past the grace period; this is for a store that cannot finish
    // (a disk that hangs): the stop still ends, and says so.
    setTimeout(() => {
      stderrLine(`svcq: the server did not finish stopping within ${flags['shutdown-grace'] + STOP_MARGIN_S} s; exiting without it`);
      process.exit(1);
    }, graceMs + STOP_MARGIN_S * 1000).unref();
    await server.close();
    process.exit(0);
  }
}

/** The flag's values; from SVCQ_PUSH_ALLOW oclif hands over the environment's one string as it is, not a list. */
function pushAllowOf(values: string[] | string | undefined): string[] {
  return values === undefined ? [] : typeof values === 'string' ? [values] : values;
}
