import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';

/** Environment variables a command is not given: the worker's token, and the server's master token. */
const CREDENTIALS = ['SVCQ_TOKEN', 'SVCQ_MASTER_TOKEN'];

/** How much of CMD's stderr an error record keeps (decisions §1.3). */
export const STDERR_TAIL_BYTES = 4096;
/** After SIGTERM, how long CMD gets before SIGKILL. */
export const KILL_GRACE_MS = 5000;

/** How often a stopped job's process group is looked at while it waits for the SIGKILL. */
const GROUP_LOOK_MS = 50;

const PROGRESS_PREFIX = '::progress';
const RETRY_IN_PREFIX = '::retry-in';
const FINAL_LINE = '::final';
/** The longest `::retry-in` the server takes (decisions §8.2). */
const MAX_RETRY_IN_SECONDS = 31_536_000;
/**
 * Most of CMD's stdout kept for the result (characters). The server refuses far smaller bodies
 * (--max-body, 1 MiB by default); past this the output is not kept at all and the item gets an
 * error record instead, so a runaway CMD cannot exhaust the worker's memory.
 */
export const MAX_STDOUT_CHARS = 16 * 1024 * 1024;
/** Longest stderr line passed through; the rest of an overlong line is dropped. */
const MAX_STDERR_LINE_CHARS = 64 * 1024;

export interface JobSpec {
  /** Shell command line, run as `sh -c CMD`. */
  command: string;
  /** Written to CMD's stdin, then stdin is closed. */
  input: string;
  /** Added to the worker's own environment. */
  env: Record<string, string>;
  /** SIGTERM after this long (then SIGKILL after a grace). */
  timeoutMs?: number;
  /** A `::progress` line, already turned into the JSON text of a progress record. */
  onProgress(record: string): void;
  /** One complete line of CMD's stderr, without its newline. */
  onStderrLine(line: string): void;
  /** A `::progress` line that could not be understood. */
  onWarning(message: string): void;
}

export interface JobOutcome {
  /** null when CMD ended by a signal or never started */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** stdout without the `::progress` lines */
  stdout: string;
  /** stdout was larger than {@link MAX_STDOUT_CHARS}: `stdout` is incomplete and must not be posted. */
  stdoutOverflow: boolean;
  /** The last {@link STDERR_TAIL_BYTES} of stderr. */
  stderrTail: string;
  timedOut: boolean;
  /**
   * CMD was started. False when the child ended before it got that far: it could not be spawned,
   * or a signal meant for the worker's process group reached it between the fork and the moment it
   * left that group (see {@link Job}).
   */
  started: boolean;
  /** Why CMD could not be started, if it could not. */
  spawnError?: string;
  /** CMD's last `::retry-in N` line: its wish that a failure be retried not before N seconds (decisions §8.2). */
  retryIn?: number;
  /** CMD printed a `::final` line (after any `::retry-in`): its wish that a failure not be retried (decisions §8.2). */
  final?: boolean;
}

/**
 * One run of CMD for one item. CMD gets its own session and process group, so a Ctrl-C at the
 * terminal reaches the worker alone (which then lets CMD finish), and stopping CMD stops whatever it
 * started too. One gap remains, and the caller closes it: between the fork and the child's
 * `setsid()` the child is still in the worker's group, and a terminal signal sent in that moment is
 * held until just before exec and then kills it. Such a child never ran CMD, which
 * {@link JobOutcome.started} tells, so it can simply be started again.
 */
export class Job {
  readonly done: Promise<JobOutcome>;
  private readonly child: ChildProcess;
  private killTimer?: NodeJS.Timeout;
  private timeoutTimer?: NodeJS.Timeout;
  private timedOut = false;
  /** The outcome is settled: CMD's group is no longer ours to signal. */
  private finished = false;
  /** Settles the outcome once the SIGKILL due after a stop has gone out (see {@link terminate}). */
  private afterKill?: () => void;

  constructor(spec: JobSpec) {
    // `sh -c CMD`, after a first shell writes one byte to fd 3 (and closes it) and then becomes that
    // shell with exec: same pid and group, $0 and no arguments as before. The byte proves the
    // command was started; without it, a child that died by a signal died before it could run.
    // A single simple command is run as `exec CMD`, so that CMD itself is the child: killed by a
    // signal, it is reported as that signal. (sh runs anything else in a child of its own, and
    // says only 128 + n for a signal n, the same as an exit code of 128 + n.)
    // The worker's environment without its credentials: a command that handles what anybody
    // posted could print them into a result or an error's stderr, which the producer reads.
    const env: NodeJS.ProcessEnv = { ...process.env, ...spec.env };
    for (const secret of CREDENTIALS) delete env[secret];
    const command = execsAsItself(spec.command, env.PATH ?? '') ? `exec ${spec.command}` : spec.command;
    this.child = spawn('sh', ['-c', 'printf . >&3; exec 3>&-; exec sh -c "$1"', 'sh', command], {
      env,
      stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
      detached: true,
    });
    let started = false;
    const marker = this.child.stdio[3] as NodeJS.ReadableStream | null;
    marker?.on('data', () => (started = true));
    marker?.on('error', () => {});
    let wish: { retryIn?: number; final?: boolean } = {};
    const stdout = new LineSplitter((line) => {
      if (line.trimEnd() === FINAL_LINE) {
        wish = { final: true };
        return false;
      }
      if (line.startsWith(RETRY_IN_PREFIX) && (line.length === RETRY_IN_PREFIX.length || line[RETRY_IN_PREFIX.length] === ' ')) {
        const text = line.slice(RETRY_IN_PREFIX.length).trim();
        const seconds = /^\d+$/.test(text) ? Number(text) : NaN;
        if (seconds >= 0 && seconds <= MAX_RETRY_IN_SECONDS) wish = { retryIn: seconds };
        else spec.onWarning(`ignored a retry-in line that is not a whole number of seconds from 0 to ${MAX_RETRY_IN_SECONDS}: ${line.slice(0, 200)}`);
        return false;
      }
      if (line.startsWith(PROGRESS_PREFIX) && (line.length === PROGRESS_PREFIX.length || line[PROGRESS_PREFIX.length] === ' ')) {
        const record = progressRecord(line.slice(PROGRESS_PREFIX.length).trim());
        if (record === undefined) spec.onWarning(`ignored a progress line that is neither an integer nor a JSON object: ${line.slice(0, 200)}`);
        else spec.onProgress(record);
        return false;
      }
      return true;
    }, MAX_STDOUT_CHARS);
    const stderr = new LineSplitter((line) => {
      spec.onStderrLine(line);
      return false;
    }, MAX_STDERR_LINE_CHARS);
    let tail = Buffer.alloc(0);
    this.child.stdout!.on('data', (chunk: Buffer) => stdout.push(chunk));
    this.child.stderr!.on('data', (chunk: Buffer) => {
      tail = Buffer.concat([tail, chunk]);
      if (tail.length > STDERR_TAIL_BYTES) tail = tail.subarray(tail.length - STDERR_TAIL_BYTES);
      stderr.push(chunk);
    });
    // CMD may exit without reading its input: the broken pipe is its business, not a worker failure.
    this.child.stdin!.on('error', () => {});
    this.child.stdin!.end(spec.input);
    if (spec.timeoutMs) {
      this.timeoutTimer = setTimeout(() => {
        this.timedOut = true;
        this.terminate();
      }, spec.timeoutMs);
    }

    this.done = new Promise<JobOutcome>((resolve) => {
      let spawnError: string | undefined;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
      const finish = (): void => {
        if (this.finished) return;
        this.finished = true;
        clearTimeout(this.timeoutTimer);
        clearTimeout(this.killTimer);
        stdout.end();
        stderr.end();
        resolve({
          exitCode: exit?.code ?? null,
          signal: exit?.signal ?? null,
          stdout: stdout.kept,
          stdoutOverflow: stdout.overflow,
          stderrTail: spawnError ?? tail.toString('utf8'),
          timedOut: this.timedOut,
          started,
          spawnError,
          ...wish,
        });
      };
      this.child.once('error', (err) => {
        spawnError = `could not start sh: ${err.message}`;
        finish();
      });
      this.child.once('exit', (code, signal) => {
        exit = { code, signal };
        // Something CMD started in the background may hold stdout open: do not wait for it forever.
        const grace = setTimeout(() => {
          this.child.stdout!.destroy();
          this.child.stderr!.destroy();
        }, 1000);
        this.child.once('close', () => {
          clearTimeout(grace);
          // Stopped by us, with something CMD started still in its group (ignoring SIGTERM, say): the
          // job ends when the SIGKILL due after the grace has reached it, not left running; or
          // earlier, once the group is gone: a member that closed its output at SIGTERM may not have
          // finished exiting when the output's end is seen, so the group is looked at again.
          if (this.killTimer && this.groupAlive()) {
            const look = setInterval(() => {
              if (this.finished || this.groupAlive()) return;
              clearInterval(look);
              finish();
            }, GROUP_LOOK_MS);
            this.afterKill = () => {
              clearInterval(look);
              finish();
            };
          } else finish();
        });
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** SIGKILL to CMD and everything it started, at once (the worker is exiting and cannot wait). */
  kill(): void {
    if (!this.finished) this.signalGroup('SIGKILL');
  }

  /**
   * SIGTERM to CMD's process group; SIGKILL if it is still there after {@link KILL_GRACE_MS}. Also
   * after `sh` itself has exited, while something it started is still in the group (holding its
   * output open or not): the group lives as long as any member, so its id cannot have been reused.
   */
  terminate(): void {
    if (this.finished || this.killTimer) return;
    this.signalGroup('SIGTERM');
    this.killTimer = setTimeout(() => {
      this.signalGroup('SIGKILL');
      this.afterKill?.();
    }, KILL_GRACE_MS);
  }

  /**
   * Some process of CMD's group is still running. A member that has exited and waits to be reaped
   * (a zombie) does not count: an orphan goes to process 1, which in a container is often not an
   * init that reaps, and the group's id would answer a signal for as long as it stays.
   */
  private groupAlive(): boolean {
    const pid = this.child.pid;
    if (pid === undefined) return false;
    try {
      process.kill(-pid, 0);
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'EPERM';
    }
    return runningInGroup(pid);
  }

  private signalGroup(signal: NodeJS.Signals): void {
    const pid = this.child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // The group is already gone.
    }
  }
}

/**
 * The progress record for what follows `::progress`: an integer n is `{"percent":n}`, a JSON
 * object is taken as it is; anything else is undefined.
 */
export function progressRecord(text: string): string | undefined {
  if (/^-?\d+$/.test(text)) return JSON.stringify({ percent: Number(text) });
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return text;
  } catch {
    // not JSON
  }
  return undefined;
}

/**
 * The result record for what CMD printed (decisions §1.3): the text itself when it is one JSON
 * object, else `{"output": text}` without the final newline.
 */
export function resultRecord(stdout: string): string {
  const trimmed = stdout.trim();
  if (trimmed.startsWith('{')) {
    try {
      const value: unknown = JSON.parse(trimmed);
      if (typeof value === 'object' && value !== null && !Array.isArray(value)) return trimmed;
    } catch {
      // not one JSON object: plain output
    }
  }
  return JSON.stringify({ output: stdout.replace(/\r?\n$/, '') });
}

/**
 * Splits a byte stream into UTF-8 lines; lines the callback returns true for are kept. Work is
 * linear in the input (only new text is searched for line ends), and memory is bounded by
 * `limit`: a longer line is cut there, and kept text past it sets `overflow` instead of growing.
 */
class LineSplitter {
  kept = '';
  overflow = false;
  private readonly decoder = new StringDecoder('utf8');
  private partial = '';

  constructor(
    private readonly onLine: (line: string) => boolean,
    private readonly limit: number,
  ) {}

  push(chunk: Buffer): void {
    this.feed(this.decoder.write(chunk));
  }

  end(): void {
    this.feed(this.decoder.end());
    if (this.partial !== '') {
      const last = this.partial;
      this.partial = '';
      if (this.onLine(last)) this.keep(last);
    }
  }

  private feed(text: string): void {
    let start = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      const line = this.bounded(this.partial, text.slice(start, nl));
      this.partial = '';
      start = nl + 1;
      if (this.onLine(line.replace(/\r$/, ''))) this.keep(`${line}\n`);
    }
    if (start < text.length) this.partial = this.bounded(this.partial, text.slice(start));
  }

  /** `head + tail`, cut at the limit (a line that long is cut, and counts as overflow). */
  private bounded(head: string, tail: string): string {
    if (head.length >= this.limit) {
      this.overflow = true;
      return head;
    }
    const joined = head + tail;
    if (joined.length <= this.limit) return joined;
    this.overflow = true;
    return joined.slice(0, this.limit);
  }

  private keep(text: string): void {
    if (this.overflow || this.kept.length + text.length > this.limit) {
      this.overflow = true;
      return;
    }
    this.kept += text;
  }
}

/** sh's builtins (dash's list): `exec` of one of these names runs a program of that name, if any, which may behave otherwise (`echo`) or not exist (`exit`, `cd`). */
const SH_BUILTINS = new Set(['.', ':', '[', 'alias', 'bg', 'break', 'cd', 'chdir', 'command', 'continue', 'echo', 'eval', 'exec', 'exit', 'export', 'false', 'fc', 'fg', 'getopts', 'hash', 'jobs', 'kill', 'local', 'printf', 'pwd', 'read', 'readonly', 'return', 'set', 'shift', 'test', 'times', 'trap', 'true', 'type', 'ulimit', 'umask', 'unalias', 'unset', 'wait']);
const SH_RESERVED = new Set(['if', 'then', 'else', 'elif', 'fi', 'do', 'done', 'case', 'esac', 'while', 'until', 'for', 'in', 'function', 'select']);

/**
 * True when `exec CMD` means the same as CMD: one simple command (no `;`, `&`, `|`, newline,
 * parentheses or command substitution outside quotes), led by a plain word (no assignment, no
 * quoting or expansion) that names an executable file (on `pathVar`, or as a path) and is not a
 * shell builtin or reserved word. Anything else is run as it is.
 */
export function execsAsItself(command: string, pathVar: string): boolean {
  const first = /^[ \t]*([A-Za-z0-9_./+-]+)(?=[ \t]|$)/.exec(command)?.[1];
  if (!first || SH_BUILTINS.has(first) || SH_RESERVED.has(first)) return false;
  let quote: string | null = null;
  for (let i = 0; i < command.length; i++) {
    const c = command[i]!;
    if (quote === "'") {
      if (c === "'") quote = null;
    } else if (c === '\\') {
      i++;
    } else if (c === '`' || (c === '$' && command[i + 1] === '(')) {
      return false;
    } else if (quote === '"') {
      if (c === '"') quote = null;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (';&|()\n\r'.includes(c)) {
      return false;
    }
  }
  if (quote !== null) return false;
  const candidates = first.includes('/') ? [first] : pathVar.split(':').map((dir) => path.join(dir || '.', first));
  return candidates.some((file) => {
    try {
      accessSync(file, constants.X_OK);
      return statSync(file).isFile();
    } catch {
      return false;
    }
  });
}

/**
 * Whether a process of group `pgid` is running (not a zombie), from /proc. Where /proc cannot be
 * read (not Linux), the group answering a signal is all there is to go by: true.
 */
function runningInGroup(pgid: number): boolean {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return true;
  }
  for (const entry of entries) {
    if (entry.charCodeAt(0) < 48 || entry.charCodeAt(0) > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'latin1');
    } catch {
      continue;
    }
    // pid (comm) state ppid pgrp …: the command name may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}
