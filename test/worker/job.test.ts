import { existsSync, readFileSync } from 'node:fs';
import { expect } from 'chai';
import { Job, KILL_GRACE_MS, execsAsItself } from '../../src/worker/job.js';

describe('running CMD as itself (decisions §1.3: a signal is reported as a signal)', () => {
  const PATH = process.env.PATH ?? '/usr/bin:/bin';

  it('runs one simple command naming an executable as `exec CMD`: its arguments may hold quotes, spaces, redirections and expansions', () => {
    for (const cmd of ['node -e "process.kill(process.pid, 9)"', 'sh job.sh', ' cat', "python3 -c 'print(1); print(2)'", 'sort -n > out.txt', 'env X="a;b" cat', `${process.execPath} --version`]) {
      expect(execsAsItself(cmd, PATH), cmd).to.equal(true);
    }
  });

  it('runs anything else as it is: lists, pipes, background, subshells, command substitution, assignments, builtins, reserved words, unknown programs', () => {
    for (const cmd of ['cat; echo done', 'cat | sort', 'cat && true', 'cat &', '(cat)', 'cat $(echo x)', 'cat `echo x`', 'cat "$(echo x)"', 'X=1 cat', 'echo hi', 'exit 3', 'cd /tmp', 'if true; then cat; fi', 'no-such-program-here x', 'cat 2>&1', 'cat\nls', '"cat" x', 'cat "unclosed']) {
      expect(execsAsItself(cmd, PATH), JSON.stringify(cmd)).to.equal(false);
    }
  });
});

describe('stopping CMD (decisions §1.3: --timeout, a cancel, a second signal)', function () {
  this.timeout(20_000);

  /** True while `pid` is a live process (a zombie waiting to be reaped counts as gone). */
  const alive = (pid: number): boolean => {
    try {
      return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    } catch {
      return false;
    }
  };

  it('a command whose processes all end at SIGTERM ends at once, not after the grace: what it started and is dead is not waited for, also where nobody reaps it (decisions §1.3)', async function () {
    if (!existsSync(`/proc/${process.pid}/stat`)) this.skip();
    let started = false;
    // sh runs sleep in the foreground; both end at SIGTERM. sh is reaped by the worker, the sleep,
    // orphaned, by whatever process 1 is: in a container often nobody, and it stays a zombie.
    const job = new Job({ command: 'echo up >&2; sleep 30; echo never', input: '', env: {}, onProgress: () => {}, onStderrLine: () => (started = true), onWarning: () => {} });
    try {
      while (!started) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 100));
      const stoppedAt = Date.now();
      job.terminate();
      const outcome = await job.done;
      expect(outcome.signal).to.equal('SIGTERM');
      expect(Date.now() - stoppedAt, 'the job waited for the grace').to.be.below(KILL_GRACE_MS - 1000);
    } finally {
      try {
        process.kill(-job.pid!, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    }
  });

  it('a member of the group that closes its output at SIGTERM and exits a moment later ends the job when it has exited, not after the grace (decisions §1.3)', async function () {
    if (!existsSync(`/proc/${process.pid}/stat`)) this.skip();
    let started = false;
    // The inner shell's trap closes the output at once and exits half a second later: the output's
    // end is seen while the group still has a running member.
    const job = new Job({
      command: `echo up >&2; sh -c 'trap "exec >&- 2>&-; sleep 0.5; exit 0" TERM; while :; do sleep 0.1; done'`,
      input: '',
      env: {},
      onProgress: () => {},
      onStderrLine: () => (started = true),
      onWarning: () => {},
    });
    try {
      while (!started) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 100));
      const stoppedAt = Date.now();
      job.terminate();
      await job.done;
      const took = Date.now() - stoppedAt;
      expect(took, 'the job ended before the member had exited').to.be.at.least(400);
      expect(took, 'the job waited for the grace').to.be.below(KILL_GRACE_MS - 1000);
    } finally {
      try {
        process.kill(-job.pid!, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    }
  });

  it('a command stopped with SIGTERM is stopped whole: what it started and left behind ignoring SIGTERM gets SIGKILL after the grace, also once sh has exited, and the job ends only then', async function () {
    if (!existsSync(`/proc/${process.pid}/stat`)) this.skip();
    let inner: number | undefined;
    // sh exits at SIGTERM; the shell it started ignores it (and so does its sleep), holding the output open.
    const job = new Job({
      command: `sh -c 'trap "" TERM; echo $$ >&2; sleep 30'; true`,
      input: '',
      env: {},
      onProgress: () => {},
      onStderrLine: (line) => (inner = Number(line)),
      onWarning: () => {},
    });
    try {
      while (inner === undefined) await new Promise((r) => setTimeout(r, 20));
      const stoppedAt = Date.now();
      job.terminate();
      const outcome = await job.done;
      expect(outcome.signal).to.equal('SIGTERM');
      // SIGKILL reaches a process at once; its end is seen a moment later.
      const deadline = Date.now() + 1000;
      while (alive(inner) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(alive(inner), 'the process left behind is still running').to.equal(false);
      expect(Date.now() - stoppedAt).to.be.at.least(KILL_GRACE_MS - 100);
    } finally {
      try {
        process.kill(-job.pid!, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    }
  });
});

describe('a failing command\'s wish (decisions §8.2: retryIn, final)', () => {
  const run = (command: string): Promise<import('../../src/worker/job.js').JobOutcome & { warnings: string[] }> => {
    const warnings: string[] = [];
    const job = new Job({ command, input: '', env: {}, onProgress: () => {}, onStderrLine: () => {}, onWarning: (m) => warnings.push(m) });
    return job.done.then((outcome) => ({ ...outcome, warnings }));
  };

  it('a `::retry-in N` line is the wish to be retried not before N seconds; it is not part of the output', async () => {
    const outcome = await run('echo before; echo "::retry-in 30"; echo after; exit 2');
    expect(outcome).to.include({ exitCode: 2, retryIn: 30 });
    expect(outcome.final).to.equal(undefined);
    expect(outcome.stdout).to.equal('before\nafter\n');
  });

  it('a `::final` line is the wish that the failure not be retried; the last of the two lines printed wins', async () => {
    const final = await run('echo "::retry-in 5"; echo ::final; exit 1');
    expect([final.final, final.retryIn]).to.deep.equal([true, undefined]);
    const retry = await run('echo ::final; echo "::retry-in 5"; exit 1');
    expect([retry.final, retry.retryIn]).to.deep.equal([undefined, 5]);
  });

  it('a `::retry-in` that is not a whole number of seconds from 0 to 31536000 is ignored, with a warning', async () => {
    for (const bad of ['-1', '1.5', 'soon', '31536001', '']) {
      const outcome = await run(`echo "::retry-in ${bad}"; exit 1`);
      expect(outcome.retryIn, bad).to.equal(undefined);
      expect(outcome.warnings, bad).to.have.length(1);
    }
  });
});
