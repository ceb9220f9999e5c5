import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import { BIN, REPO, cleanupTemp, tempDir } from './support/server.js';

interface Block {
  kind: 'run' | 'background';
  code: string;
  /** For a background block: what it prints once it is ready. */
  ready?: string;
}

/** The shell blocks of examples/README.md that carry a `<!-- walkthrough: ... -->` mark, in order. */
function walkthroughBlocks(readme: string): Block[] {
  const blocks: Block[] = [];
  for (const m of readme.matchAll(/<!-- walkthrough: (run|background)([^>]*)-->\n```sh\n([\s\S]*?)```/g)) {
    blocks.push({ kind: m[1] as Block['kind'], code: m[3]!, ready: /ready when it prints "([^"]+)"/.exec(m[2]!)?.[1] });
  }
  return blocks;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

async function until(check: () => boolean, what: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('examples/README.md walkthrough', function () {
  this.timeout(60_000);

  it('runs, pasted block by block, from serve to a finished item (STYLE: examples are executable and tested)', async () => {
    const readme = readFileSync(path.join(REPO, 'examples/README.md'), 'utf8');
    const blocks = walkthroughBlocks(readme);
    expect(blocks.map((b) => b.kind)).to.include.members(['run', 'background']);

    const demo = tempDir('svcq-demo-');
    const port = await freePort();
    // The only changes to what a reader pastes: the built binary instead of `npx svcq` (same
    // program, without npm's start-up), a free port, and a temp folder instead of /tmp/svcq-demo.
    const adapt = (code: string): string =>
      code.replaceAll('npx svcq', `"${process.execPath}" "${BIN}"`).replaceAll('8080', String(port)).replaceAll('/tmp/svcq-demo', demo);

    // Foreground blocks run in one shell, as in one terminal; at a background block the shell
    // waits until the test has started it (in its own "terminal") and found it ready.
    let script = 'set -e\n';
    const background: Block[] = [];
    blocks.forEach((block) => {
      if (block.kind === 'run') script += `${adapt(block.code)}\n`;
      else {
        const n = background.push(block) - 1;
        script += `echo "::background ${n}"\nwhile [ ! -f "${demo}/.ready-${n}" ]; do sleep 0.05; done\n`;
      }
    });
    const scriptFile = path.join(demo, 'walkthrough.sh');
    writeFileSync(scriptFile, script);

    const env: NodeJS.ProcessEnv = { ...process.env };
    for (const key of Object.keys(env)) if (key.startsWith('SVCQ_')) delete env[key];
    const started: Array<{ proc: ChildProcess; output: () => string; exited: Promise<number | null> }> = [];
    const startBackground = async (n: number): Promise<void> => {
      const proc = spawn('sh', ['-c', `exec ${adapt(background[n]!.code.trim())}`], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
      proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
      const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
      started.push({ proc, output: () => out, exited });
      const { ready } = background[n]!;
      if (ready) await until(() => out.includes(ready) || proc.exitCode !== null, `"${ready}" from ${background[n]!.code.trim()}`, 20_000);
      expect(proc.exitCode, out).to.equal(null);
      writeFileSync(path.join(demo, `.ready-${n}`), '');
    };

    try {
      const shell = spawn('sh', [scriptFile], { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      const pending: Array<Promise<void>> = [];
      shell.stdout.on('data', (c: Buffer) => {
        stdout += c.toString();
        for (const m of c.toString().matchAll(/::background (\d+)/g)) pending.push(startBackground(Number(m[1])));
      });
      shell.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      const code = await new Promise<number | null>((resolve) => shell.once('exit', resolve));
      await Promise.all(pending);
      const logs = started.map((s) => s.output()).join('\n---\n');
      expect(code, `walkthrough failed:\n${stdout}\n${stderr}\n${logs}`).to.equal(0);

      // What the reader is told to expect.
      expect(stdout).to.match(/"svc-user-name":"alice","tokenSha256":"[0-9a-f]{64}"/);
      expect(stdout).to.contain('4 put, 0 deleted, 0 unchanged');
      expect(stdout).to.match(/status +finished\n[\s\S]*result +\{"echo":\{"text":"hello"\},"id":"[0-9a-f]{16}"\}/);
      expect(stderr, stderr).to.contain("svcq: rejected: /width: must have required property 'width'");
      expect(stderr).to.contain('svcq: not found (wrong token, host or queue?)');
      expect(stdout).to.contain('(rejected by the schema, as expected)');
      expect(stdout).to.contain('(bob may not post, as expected)');
      expect(stdout).to.match(/progress +\{"percent":100\}\nresult +\{"thumbnail":"dog-128.png","width":128\}/);
      expect(existsSync(path.join(demo, 'data'))).to.equal(true);

      // Ctrl-C in terminal 3 (the worker) is graceful; then the server stops.
      const [server, ...workers] = started;
      for (const w of workers) {
        w.proc.kill('SIGINT');
        expect(await w.exited, w.output()).to.equal(0);
      }
      server!.proc.kill('SIGINT');
      expect(await server!.exited).to.equal(0);
    } finally {
      for (const s of started) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGKILL');
      cleanupTemp(demo);
    }
  });
});
