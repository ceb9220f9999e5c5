import { hostname } from 'node:os';
import { Args, Flags } from '@oclif/core';
import { BaseCommand, UserError, hostFlag } from '../src/cli/base-command.js';
import { ConsoleSink } from '../src/worker/console-sink.js';
import { Worker } from '../src/worker/worker.js';
import { keepOutputErrorsQuiet, stderrLine } from '../src/server-output.js';

export default class Work extends BaseCommand<typeof Work> {
  static override summary = 'Run a command for each item of a queue (the generic worker).';
  static override description = `Claims items (long-polling), runs CMD through sh -c for each with the item JSON on stdin and SVCQ_QUEUE, SVCQ_ITEM_ID and SVCQ_ATTEMPT in its environment (the worker's, without SVCQ_TOKEN and SVCQ_MASTER_TOKEN), and submits what it printed.
Lines "::progress <integer or JSON object>" on CMD's stdout are posted as progress; the rest of stdout is the result (as is when it is one JSON object, else {"output": "..."}). A non-zero exit, a signal or --timeout is reported as an error record {exitCode, signal, stderr}; a failing CMD that printed a line "::retry-in N" asks for its item to be retried not before N seconds, one that printed "::final" for no further attempt.
The lease is extended while CMD runs; a cancelled item's CMD gets SIGTERM. Results and errors are handed in with the next claim (one request per job; one that waits over a second for a claim is submitted on its own), and --prefetch N claims up to N items at once. Ctrl-C (or SIGTERM) claims nothing new, releases the items claimed ahead and not started, and lets running commands finish; a second one stops them.
On a terminal a status line is shown; on a pipe or with --json each event is one line of JSON on stdout. Exit codes: 0 done, 1 failure (with --once: CMD failed), 3 --once found the queue empty.`;
  static override examples = [
    '<%= config.bin %> work thumbnails --host jobs.example.com --exec "node examples/jobs/progress.mjs"',
    '<%= config.bin %> work public-echo --host jobs.example.com --exec "sh examples/jobs/echo.sh" --concurrency 4',
    `<%= config.bin %> work thumbnails --host jobs.example.com --exec ./resize.sh --criteria '{"width":{"lt":1000}}' --once`,
  ];

  static override args = {
    queue: Args.string({ description: 'queue name', required: true, ignoreStdin: true }),
  };

  static override flags = {
    host: hostFlag,
    exec: Flags.string({ description: 'command run for each item (through sh -c)', required: true }),
    concurrency: Flags.integer({ description: 'items handled at once', default: 1, min: 1, max: 256 }),
    criteria: Flags.string({ description: 'claim only items matching these criteria (JSON object)' }),
    worker: Flags.string({ description: 'worker name sent with claims (default hostname:pid)' }),
    once: Flags.boolean({ description: 'handle one item, then exit (exit code 3 when the queue stays empty)', default: false }),
    timeout: Flags.integer({ description: 'stop CMD after this many seconds and report an error (at most 2147483, the longest a timer waits)', min: 1, max: 2_147_483 }),
    wait: Flags.integer({ description: 'seconds each claim waits for an item (long-poll); 0 polls, pausing up to 2 s between claims while the queue is empty (as long as Retry-After says, at most 60 s, when a rate limit held the claim back)', default: 30, min: 0, max: 30 }),
    prefetch: Flags.integer({
      description: 'claim up to this many items in one claim; items claimed ahead wait for a free slot, and no more are claimed ahead than can start before half their lease has run',
      default: 1,
      min: 1,
      max: 100,
    }),
    'hand-in': Flags.boolean({
      description: 'hand results and errors in with the next claim, one request per job (the default); --no-hand-in submits each on its own',
      default: true,
      allowNo: true,
    }),
  };

  async run(): Promise<void> {
    const { flags } = this;
    const { args } = await this.parse(Work);
    const json = this.jsonEnabled() || !process.stdout.isTTY;
    const sink = new ConsoleSink({
      json: json ? process.stdout : null,
      statusLine: !this.jsonEnabled() && process.stderr.isTTY === true,
      stderr: process.stderr,
      jsonErrors: this.jsonEnabled(),
      queue: args.queue,
    });
    const worker = new Worker(
      this.client({ host: flags.host }),
      {
        queue: args.queue,
        command: flags.exec,
        concurrency: flags.concurrency,
        criteria: parseCriteria(flags.criteria),
        worker: flags.worker ?? `${hostname()}:${process.pid}`,
        once: flags.once,
        timeoutSeconds: flags.timeout,
        waitSeconds: flags.wait,
        prefetch: flags.prefetch,
        handIns: flags['hand-in'],
      },
      sink,
    );

    let signals = 0;
    const onSignal = (): void => {
      signals++;
      if (signals === 1) worker.stop();
      else if (signals === 2) worker.force();
      else worker.giveUp();
    };
    // A closed terminal (SIGHUP) stops the worker like Ctrl-C; and however the process ends, the
    // commands it started end with it.
    const killAll = (): void => worker.killAll();
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    process.on('SIGHUP', onSignal);
    process.on('exit', killAll);
    // Output that can no longer be written (stdout or stderr on a disk that filled, a reader that
    // went away) stops the worker as Ctrl-C does: what runs finishes and is handed in, and it exits
    // 1. Unheard, the failed write would end the process mid-job, and the results with it.
    let outputFailed: Error | undefined;
    const onOutputError = (err: Error): void => {
      if (outputFailed) return;
      outputFailed = err;
      worker.stop();
    };
    keepOutputErrorsQuiet(onOutputError);
    const code = await worker.run();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('SIGHUP', onSignal);
    if (outputFailed) {
      stderrLine(`svcq: the worker stopped: its output could not be written (${outputFailed.message})`);
      this.exit(code === 0 ? 1 : code);
    }
    if (code !== 0) this.exit(code);
  }
}

function parseCriteria(text: string | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new UserError(`--criteria is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UserError('--criteria must be a JSON object mapping item fields to matchers');
  return value as Record<string, unknown>;
}
