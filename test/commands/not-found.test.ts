import { spawn, spawnSync } from 'node:child_process';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { BIN, serverForSuite } from '../support/server.js';
import { HOST } from '../worker/support.js';

const STACK = /\s+at .*:\d+:\d+/;
const hasScript = spawnSync('script', ['--version']).status === 0;

describe('a mistyped command: one sentence suggesting from the command word alone, exit 127, never a stack trace', () => {
  const server = serverForSuite();

  const cases: Array<[string[], string]> = [
    [['wokr', 'thumbnails'], '"wokr" is not a svcq command. Did you mean "work"?'],
    [['pots', 'q'], '"pots" is not a svcq command. Did you mean "post"?'],
    [['itme', 'q', '0123456789abcdef'], '"itme" is not a svcq command. Did you mean "item"?'],
    [['logs', 'shwo'], '"logs shwo" is not a svcq command. Did you mean "logs show"?'],
    [['tokne', 'new'], '"tokne" is not a svcq command. Did you mean "token new"?'],
    [['qwertyuiop', 'x'], '"qwertyuiop" is not a svcq command. Run "svcq help" for the list.'],
    [['queus'], '"queus" is not a svcq command. Did you mean "queues" or "queue"?'],
    [['quees'], '"quees" is not a svcq command. Did you mean "queues"?'],
  ];
  for (const [args, sentence] of cases) {
    it(`off a TTY, svcq ${args.join(' ')} says: ${sentence}`, async () => {
      const run = await runCli(args);
      expect(run.code).to.equal(127);
      expect(run.stderr).to.equal(`svcq: ${sentence}\n`);
      expect(run.stdout).to.equal('');
    });
  }

  // oclif reads a word after a command that takes no arguments as part of the command's name.
  const extra: Array<[string[], string]> = [
    [['logs', 'show', 'access.log'], 'logs show takes no arguments ("access.log" given): see "svcq logs show --help"'],
    [['payload', 'jobs.test/q', '0123456789abcdef'], 'payload takes no arguments ("jobs.test/q" "0123456789abcdef" given): see "svcq payload --help"'],
    [['queues', 'x'], 'queues takes no arguments ("x" given): see "svcq queues --help"'],
  ];
  for (const [args, sentence] of extra) {
    it(`a command given arguments it does not take is a usage error, not an unknown command: svcq ${args.join(' ')} says: ${sentence} (exit 2)`, async () => {
      const run = await runCli(args);
      expect(run.code).to.equal(2);
      expect(run.stderr).to.equal(`svcq: ${sentence}\n`);
      expect(run.stdout).to.equal('');
      const json = await runCli([...args, '--json']);
      expect(json.code).to.equal(2);
      expect(JSON.parse(json.stderr)).to.deep.equal({ error: sentence });
    });
  }

  it('off a TTY it does not wait for an answer, even with stdin left open', async () => {
    const proc = spawn(process.execPath, [BIN, 'wokr', 'thumbnails'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const code = await new Promise<number | null>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('it waited for input')), 10_000);
      proc.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    proc.stdin.end();
    expect(code).to.equal(127);
  });

  it('with --json the sentence is { error }, on stderr where errors go (decisions §1.2)', async () => {
    const run = await runCli(['stats', 'nwo', '--json']);
    expect(run.code).to.equal(127);
    expect(run.stdout).to.equal('');
    expect(JSON.parse(run.stderr)).to.deep.equal({ error: '"stats nwo" is not a svcq command. Did you mean "stats now"?' });
  });

  it('on a TTY, accepting the suggestion runs it with the rest of the words, and a failure is one sentence, no stack trace', async function () {
    if (!hasScript) this.skip();
    const command = [process.execPath, BIN, 'itme', 'q', '0123456789abcdef', '--url', server.url, '--host', HOST, '--token', 'some-user-token'].join(' ');
    // script(1) gives the command a terminal; the answer arrives once the question has been asked.
    const proc = spawn('script', ['-qfec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let out = '';
    proc.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      if (out.includes('[y/N]') && proc.stdin.writable) proc.stdin.end('y\n');
    });
    proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
    expect(out).to.include('"itme" is not a svcq command. Did you mean "item"?');
    expect(out).to.include(`Run "svcq item q 0123456789abcdef --url ${server.url} --host ${HOST} --token some-user-token"? [y/N]`);
    // The item command ran: the server's wall, in its one sentence.
    expect(out).to.include('svcq: not found (wrong token, host or queue?)');
    expect(out).to.not.match(STACK);
    expect(code).to.equal(1);
  });
});
