import { execFileSync, spawnSync } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { BIN, serverForSuite } from '../support/server.js';
import { HOST, defineQueue, postItem, queueName } from '../worker/support.js';

/** Polls `check` every 100 ms until it returns true, failing after `ms` with the last screen. */
async function until(check: () => boolean, what: string, last: () => string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the screen:\n${last()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('svcq top (decisions §5.1: operators see their queues live)', () => {
  const server = serverForSuite();
  const first = queueName('top-a');
  const second = queueName('top-b');
  const ids: string[] = [];

  before(async () => {
    await defineQueue(server, first);
    await defineQueue(server, second);
    for (let n = 0; n < 3; n++) ids.push(await postItem(server, first, { n }));
    await postItem(server, second, { n: 9 });
    const claim = await request(server.url, `/${second}/claim`, { method: 'POST', host: HOST, body: JSON.stringify({ worker: 'top-worker' }) });
    expect(claim.status).to.equal(200);
  });

  it('off a terminal it prints one snapshot as a table and exits 0', async () => {
    const run = await runCli(['top', '--url', server.url, '--token', server.masterToken], { env: { NO_COLOR: '1' } });
    expect(run.code, run.stderr).to.equal(0);
    // eslint-disable-next-line no-control-regex -- no screen control off a terminal
    expect(run.stdout).not.to.match(/\u001b/);
    const lines = run.stdout.split('\n');
    const header = lines.find((l) => l.includes('in flight'))!;
    for (const column of ['host', 'queue', 'pending', 'in flight', 'finished/s', 'failed/s', 'oldest pending']) expect(header).to.include(column);
    const cells = (name: string): string[] => lines.find((l) => l.includes(name))!.split('│').map((c) => c.trim()).filter((c) => c !== '');
    expect(cells(first).slice(0, 6)).to.deep.equal([HOST, first, '3', '0', '0', '0']);
    expect(cells(second).slice(0, 6)).to.deep.equal([HOST, second, '0', '1', '0', '0']);
    expect(cells(second)[6]).to.equal('-');
  });

  it('off a terminal --json prints the snapshot as JSON: the queues and the server health', async () => {
    const run = await runCli(['top', '--json', '--url', server.url, '--token', server.masterToken]);
    expect(run.code, run.stderr).to.equal(0);
    const snapshot = JSON.parse(run.stdout) as { queues: Array<{ name: string; counts: Record<string, number> }>; health: { hostname: string } | null };
    expect(snapshot.queues.map((q) => q.name)).to.deep.equal([first, second].sort());
    expect(snapshot.queues.find((q) => q.name === first)!.counts.pending).to.equal(3);
    expect(snapshot.health?.hostname).to.be.a('string');
  });

  it('without the master token it meets the wall with one sentence and exit 1 (decisions §1.2)', async () => {
    const run = await runCli(['top', '--url', server.url, '--token', 'wrong']);
    expect(run.code).to.equal(1);
    expect(run.stderr).to.equal('svcq: not found (wrong token, host or queue?)\n');
  });

  it('a --url that is some other web server (200 with a page) is one sentence and exit 1, not a TypeError', async () => {
    const other = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>welcome</html>'));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
      for (const json of [[], ['--json']]) {
        const run = await runCli(['top', ...json, '--url', url, '--token', server.masterToken]);
        expect(run.code).to.equal(1);
        expect(run.stdout).to.equal('');
        const sentence = json.length ? (JSON.parse(run.stderr) as { error: string }).error : run.stderr;
        expect(sentence).to.match(new RegExp(`^(svcq: )?${url} did not answer as svcq does \\(GET /api/v2/queues gave no JSON object\\): is --url right\\?\n?$`));
      }
    } finally {
      other.close();
    }
  });

  describe('on a real terminal (tmux)', function () {
    const socket = `svcq-top-test-${process.pid}`;
    const session = 'top';
    let tmuxMissing = false;
    const tmux = (...args: string[]): string => execFileSync('tmux', ['-L', socket, ...args], { encoding: 'utf8' });
    const screen = (): string => tmux('capture-pane', '-p', '-t', session);
    const display = (format: string): string => tmux('display-message', '-p', '-t', session, format).trim();
    // The shell is sh, which does not redraw what was typed ahead: a command typed while `clear`
    // still runs is echoed, then wiped, and its output lands after the next prompt. So each test
    // waits for the cleared screen before it types.
    const clearScreen = async (): Promise<void> => {
      tmux('send-keys', '-t', session, 'clear', 'Enter');
      await until(() => screen().trim() === 'shell$', 'the cleared screen', screen);
    };

    before(function () {
      if (spawnSync('sh', ['-c', 'command -v tmux']).status !== 0) {
        tmuxMissing = true;
        console.log('      tmux is not installed (apt-get install tmux): skipping the terminal test of svcq top');
        this.skip();
      }
      // A shell of our own on a private tmux server, with a prompt that is easy to find.
      tmux('-f', '/dev/null', 'new-session', '-d', '-s', session, '-x', '120', '-y', '40', 'sh');
      // CI=true as a CI runner sets it: a terminal is still a terminal (Ink alone would hold every
      // frame back until exit there).
      tmux('send-keys', '-t', session, "PS1='shell$ '; export CI=true; clear", 'Enter');
    });
    after(() => {
      if (!tmuxMissing) spawnSync('tmux', ['-L', socket, 'kill-server']);
    });

    it('shows the queues full-screen, selects with the arrow keys, and on q exits 0 and gives the shell its screen back', async () => {
      await until(() => screen().trim() === 'shell$', 'the prompt', screen);
      tmux('send-keys', '-t', session, 'echo before-top-marker', 'Enter');
      await until(() => /^before-top-marker$/m.test(screen()), 'the marker line', screen);
      tmux('send-keys', '-t', session, `${process.execPath} ${BIN} top --url ${server.url} --token ${server.masterToken}; echo "top exited with $?"`, 'Enter');

      // The live view: the alternate screen, both queues, the first one selected with its oldest items.
      await until(() => screen().includes(first) && screen().includes(second) && screen().includes(ids[0]!), 'the queue rows and the selected queue', screen);
      expect(display('#{alternate_on}')).to.equal('1');
      const view = screen();
      expect(view).to.include('svcq top');
      expect(view).not.to.include('before-top-marker');
      expect(view.split('\n').find((l) => l.includes(first))).to.match(/^>/);
      expect(view).to.match(/leases \(0\)/);
      expect(view).to.match(/oldest pending \(3\)/);

      // Down selects the second queue and shows its lease.
      tmux('send-keys', '-t', session, 'Down');
      await until(() => /^>.*top-b/m.test(screen()) && screen().includes('top-worker'), 'the second queue selected with its lease', screen);
      tmux('send-keys', '-t', session, 'Up');
      await until(() => /^>.*top-a/m.test(screen()) && screen().includes(ids[0]!), 'the first queue selected again', screen);
      // End and Home go to the last and the first queue, PgDn and PgUp ten at a time (as far as there are).
      for (const [keyName, selected] of [['End', 'top-b'], ['Home', 'top-a'], ['NPage', 'top-b'], ['PPage', 'top-a']] as const) {
        tmux('send-keys', '-t', session, keyName);
        await until(() => new RegExp(`^>.*${selected}`, 'm').test(screen()), `${keyName} to select ${selected}`, screen);
      }
      expect(screen()).to.include('↑/↓ PgUp/PgDn Home/End select');

      tmux('send-keys', '-t', session, 'q');
      await until(() => /^top exited with \d+$/m.test(screen()), 'svcq top to exit', screen);
      const after = screen();
      expect(after).to.match(/^top exited with 0$/m);
      // The shell's own screen is back, as it was: the marker, the command line, and a fresh prompt.
      expect(after).to.match(/^before-top-marker$/m);
      expect(after).not.to.include('svcq top  ');
      expect(after.trimEnd().split('\n').pop()).to.equal('shell$');
      expect(display('#{alternate_on}')).to.equal('0');
      expect(display('#{cursor_flag}')).to.equal('1');
    });

    it('with a wrong token it says so in one sentence on the shell\'s own screen and exits 1 (decisions §1.2)', async () => {
      await clearScreen();
      tmux('send-keys', '-t', session, `${process.execPath} ${BIN} top --url ${server.url} --token wrong; echo "top gave $?"`, 'Enter');
      await until(() => /^top gave \d+$/m.test(screen()), 'svcq top to exit', screen);
      expect(screen()).to.match(/^svcq: not found \(wrong token, host or queue\?\)\ntop gave 1$/m);
      expect(display('#{alternate_on}')).to.equal('0');
    });

    it('q quits at once while the server has stopped answering, not when the request in flight times out', async () => {
      // A server that answers like svcq until told to stop answering, then holds every request.
      let answering = true;
      const queue = { host: HOST, name: 'stalled', counts: { pending: 1, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 }, oldestPendingAgeMs: 5, rates: { posted: 0, claimed: 0, finished: 0, failed: 0 } };
      const stalled = http.createServer((req, res) => {
        if (!answering) return;
        const body = req.url === '/api/v2/queues' ? { queues: [queue] } : req.url?.startsWith('/api/v2/queues/') ? { ...queue, oldest: [], leases: [] } : null;
        res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(body ?? { error: 'not found' }));
      });
      await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve));
      try {
        await clearScreen();
        const url = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}`;
        tmux('send-keys', '-t', session, `${process.execPath} ${BIN} top --url ${url} --token ${server.masterToken}; echo "top stopped with $?"`, 'Enter');
        await until(() => display('#{alternate_on}') === '1' && screen().includes('stalled'), 'the live view', screen);
        answering = false;
        // The next refresh is now waiting for an answer that will not come (for 10 s).
        await new Promise((r) => setTimeout(r, 1500));
        tmux('send-keys', '-t', session, 'q');
        await until(() => /^top stopped with \d+$/m.test(screen()), 'svcq top to exit', screen, 3000);
        expect(screen()).to.match(/^top stopped with 0$/m);
        expect(display('#{alternate_on}')).to.equal('0');
      } finally {
        stalled.closeAllConnections();
        stalled.close();
      }
    });

    it('on a dumb terminal (TERM=dumb, an Emacs shell buffer) it prints one snapshot and exits 0, as off a terminal, rather than redrawing with cursor movements it cannot make', async () => {
      await clearScreen();
      tmux('send-keys', '-t', session, `TERM=dumb ${process.execPath} ${BIN} top --url ${server.url} --token ${server.masterToken}; echo "dumb top gave $?"`, 'Enter');
      await until(() => /^dumb top gave \d+$/m.test(screen()), 'svcq top to exit', screen);
      const shown = screen();
      expect(shown).to.match(/^dumb top gave 0$/m);
      expect(shown).to.match(/│ host +│ queue +│ pending │ in flight │/);
      expect(shown.split('\n').find((l) => l.includes(first))).to.match(new RegExp(`│ ${HOST} +│ ${first} +│ +3 │`));
      expect(display('#{alternate_on}')).to.equal('0');
    });

    it('its first screen shows what the check before it fetched: a slow server is not asked the same again before anything shows', async () => {
      // A server that answers like svcq, each answer a second late, and counts what it is asked.
      const asked: string[] = [];
      const queue = { host: HOST, name: 'slow', counts: { pending: 2, claimed: 0, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 }, oldestPendingAgeMs: 5, rates: { posted: 0, claimed: 0, finished: 0, failed: 0 } };
      const slow = http.createServer((req, res) => {
        asked.push(req.url ?? '');
        const body = req.url === '/api/v2/queues' ? { queues: [queue] } : req.url?.startsWith('/api/v2/queues/') ? { ...queue, oldest: [{ id: 'a1b2c3d4e5f60718', postedAt: Date.now(), attempts: 0 }], leases: [] } : null;
        setTimeout(() => res.writeHead(body ? 200 : 404, { 'content-type': 'application/json' }).end(JSON.stringify(body ?? { error: 'not found' })), 1000);
      });
      await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
      try {
        await clearScreen();
        const url = `http://127.0.0.1:${(slow.address() as AddressInfo).port}`;
        tmux('send-keys', '-t', session, `${process.execPath} ${BIN} top --interval 60 --url ${url} --token ${server.masterToken}; echo "slow top gave $?"`, 'Enter');
        await until(() => display('#{alternate_on}') === '1' && /^>.*slow/m.test(screen()), 'the queue on the live view', screen);
        expect(asked.filter((u) => u === '/api/v2/queues')).to.have.length(1);
        // The selected queue's detail follows at once, not at the next refresh a minute later.
        await until(() => screen().includes('a1b2c3d4e5f60718'), 'the selected queue\'s oldest item', screen, 5000);
        tmux('send-keys', '-t', session, 'q');
        await until(() => /^slow top gave \d+$/m.test(screen()), 'svcq top to exit', screen);
        expect(screen()).to.match(/^slow top gave 0$/m);
      } finally {
        // A view left running would stand in the next test's way.
        if (display('#{alternate_on}') === '1') {
          tmux('send-keys', '-t', session, 'q');
          await until(() => /^slow top gave \d+$/m.test(screen()), 'svcq top to exit', screen);
        }
        slow.closeAllConnections();
        slow.close();
      }
    });

    it('Ctrl-C quits it too, exit 0, the terminal restored', async () => {
      await clearScreen();
      tmux('send-keys', '-t', session, `${process.execPath} ${BIN} top --url ${server.url} --token ${server.masterToken}; echo "top ended with $?"`, 'Enter');
      await until(() => display('#{alternate_on}') === '1' && screen().includes(first), 'the live view', screen);
      tmux('send-keys', '-t', session, 'C-c');
      await until(() => /^top ended with \d+$/m.test(screen()), 'svcq top to exit', screen);
      expect(screen()).to.match(/^top ended with 0$/m);
      expect(display('#{alternate_on}')).to.equal('0');
      expect(display('#{cursor_flag}')).to.equal('1');
    });
  });
});
