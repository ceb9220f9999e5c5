import type { SvcqClient } from '../client/client.js';
import { WorkLoop, type ClaimedItem, type Execution, type ItemRunner, type RunHooks, type RunOutcome, type WorkLoopOptions } from '../client/work-loop.js';
import type { WorkerSink } from '../client/work-events.js';
import { Job, MAX_STDOUT_CHARS, resultRecord, type JobOutcome } from './job.js';

export { EXIT } from '../client/work-loop.js';

export interface WorkerOptions extends Omit<WorkLoopOptions, 'runner'> {
  /** Shell command line run for each item (`sh -c`). */
  command: string;
  /** Stop CMD after this many seconds and report an error. */
  timeoutSeconds?: number;
}

/** How often a command killed before it could start (see {@link Job}) is started again. */
const MAX_RESTARTS = 5;

/**
 * The generic worker (decisions §1.3): the library's work loop (src/client/work-loop.ts), running
 * CMD for each item with the item on stdin.
 */
export class Worker extends WorkLoop {
  constructor(client: SvcqClient, options: WorkerOptions, sink: WorkerSink) {
    const { command, timeoutSeconds, ...loop } = options;
    super(client, { ...loop, runner: new CommandRunner(options.queue, command, timeoutSeconds) }, sink);
  }
}

/** Runs CMD for an item: stdout lines `::progress`, `::retry-in N` and `::final` speak to the worker, the rest is the result. */
export class CommandRunner implements ItemRunner {
  constructor(
    private readonly queue: string,
    private readonly command: string,
    private readonly timeoutSeconds?: number,
  ) {}

  refusedResult(reason: string): string {
    return JSON.stringify({ exitCode: 0, signal: null, stderr: '', reason });
  }

  start(claimed: ClaimedItem, hooks: RunHooks): Execution {
    let stopped = false;
    let job: Job | undefined;
    const { id, item, itemText, attempts } = claimed;
    const done = (async (): Promise<RunOutcome> => {
      let input: string;
      try {
        // The item as posted (interface §2.1); written out again only where the answer's text is not at hand.
        input = itemText ?? JSON.stringify(item);
      } catch {
        // An item nested too deep to be written out again (the stack runs out): CMD cannot be given it.
        return { kind: 'error', record: JSON.stringify({ exitCode: null, signal: null, stderr: '', reason: 'the item nests too deeply to be passed to the command' }), exitCode: null, signal: null, timedOut: false };
      }
      const run = (): Job => {
        job = new Job({
          command: this.command,
          input,
          env: { SVCQ_QUEUE: this.queue, SVCQ_ITEM_ID: id, SVCQ_ATTEMPT: String(attempts) },
          timeoutMs: this.timeoutSeconds ? this.timeoutSeconds * 1000 : undefined,
          onProgress: (record) => hooks.progress(record),
          onStderrLine: (line) => hooks.stderrLine(line),
          onWarning: (message) => hooks.warning(message),
        });
        if (stopped) job.terminate();
        return job;
      };
      let outcome = await run().done;
      // A signal meant for the worker (a Ctrl-C to its terminal's process group) can reach a child
      // that has not yet left that group; it dies before running CMD. The first signal lets every
      // claimed job run, so this one is started again; only the worker's own stop ends it.
      for (let again = 1; !outcome.started && outcome.signal && !outcome.timedOut && !stopped && again <= MAX_RESTARTS; again++) {
        hooks.warning(`the command was stopped by ${outcome.signal} before it could start; starting it again`);
        outcome = await run().done;
      }
      return this.outcome(outcome);
    })();
    return {
      done,
      terminate: () => {
        stopped = true;
        job?.terminate();
      },
      kill: () => job?.kill(),
    };
  }

  private outcome(outcome: JobOutcome): RunOutcome {
    if (outcome.exitCode === 0 && !outcome.timedOut && !outcome.stdoutOverflow) return { kind: 'result', record: resultRecord(outcome.stdout) };
    const record = {
      exitCode: outcome.exitCode,
      signal: outcome.signal,
      stderr: outcome.stderrTail,
      ...(outcome.timedOut ? { reason: `timed out after ${this.timeoutSeconds} s` } : {}),
      ...(outcome.stdoutOverflow && !outcome.timedOut ? { reason: `output larger than ${MAX_STDOUT_CHARS} characters` } : {}),
    };
    // CMD's wish for this failure (decisions §8.2), from its `::retry-in N` or `::final` line.
    const wish = outcome.final ? { final: true } : outcome.retryIn !== undefined ? { retryIn: outcome.retryIn } : {};
    return { kind: 'error', record: JSON.stringify(record), exitCode: outcome.exitCode, signal: outcome.signal, timedOut: outcome.timedOut, ...wish };
  }
}
