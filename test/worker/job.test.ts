import { expect } from 'chai';
import { execsAsItself } from '../../src/worker/job.js';

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
