/**
 * Runs the shell blocks of a Markdown document as a reader would paste them. A block takes part
 * when the line before its opening fence is a mark `<!-- TAG: run -->` or
 * `<!-- TAG: background, ready when it prints "TEXT" -->`; a run block may be followed by a
 * block marked `<!-- TAG: prints -->`, which holds what it prints.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export interface Block {
  kind: 'run' | 'background' | 'node';
  code: string;
  /** For a background block: what it prints once it is ready. */
  ready?: string;
  /** For a run block: what the document shows it printing, if it shows that. */
  prints?: string;
}

/** The blocks of `markdown` marked with `<!-- TAG: ... -->`, in order. */
export function markedBlocks(markdown: string, tag: string): Block[] {
  const blocks: Block[] = [];
  const re = new RegExp(`<!-- ${tag}: (run|background|node)([^>]*)-->\\n\`\`\`(?:sh|js)\\n([\\s\\S]*?)\`\`\`(?:\\n+<!-- ${tag}: prints -->\\n\`\`\`\\n([\\s\\S]*?)\`\`\`)?`, 'g');
  for (const m of markdown.matchAll(re)) {
    blocks.push({ kind: m[1] as Block['kind'], code: m[3]!, ready: /ready when it prints "([^"]+)"/.exec(m[2]!)?.[1], prints: m[4] });
  }
  return blocks;
}

/** Every fenced block of `markdown` with its language and text, in order. */
export function fencedBlocks(markdown: string): Array<{ lang: string; code: string; marked: string | null }> {
  const out: Array<{ lang: string; code: string; marked: string | null }> = [];
  for (const m of markdown.matchAll(/(?:<!-- ([a-z]+: [a-z]+)[^>]*-->\n)?```([a-z]*)\n([\s\S]*?)```/g)) {
    out.push({ lang: m[2]!, code: m[3]!, marked: m[1] ?? null });
  }
  return out;
}

/** The text of a `## Heading` section, up to the next `## ` heading. */
export function section(markdown: string, heading: string): string {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`no section "## ${heading}"`);
  const end = markdown.indexOf('\n## ', start + 4);
  return markdown.slice(start, end < 0 ? undefined : end);
}

/** Ids, times and tokens differ from run to run; the rest of an answer must not. */
export function normalise(text: string): string {
  return text
    .replaceAll('\r', '')
    .replace(/\b[0-9a-f]{64}\b/g, '<sha256>')
    .replace(/\b[0-9a-f]{16}\b/g, '<id>')
    .replace(/\b\d{13}\b/g, '<ms>')
    .trimEnd();
}

/** Ports {@link freePort} gave out in this process: none twice (nothing listens on them yet when the next is asked for). */
const givenOut = new Set<number>();

/**
 * A port nothing listens on, below the kernel's ephemeral range (32768 and up here): a server
 * another test starts on port 0 never takes it between this check and the listen that follows,
 * nor while a server on it restarts. Never one it gave before in this process: two asked for in
 * a row (a page's two workers) were once the same.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (givenOut.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (!free) continue;
    givenOut.add(port);
    return port;
  }
}

export async function until(check: () => boolean, what: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A process started in a "terminal" of its own. */
export interface Started {
  code: string;
  proc: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

/** Starts a background block (`exec`ed by sh) and waits until it prints its ready text. */
export async function startBackground(block: Block, cwd: string, env: NodeJS.ProcessEnv): Promise<Started> {
  // `exec` goes after any leading assignments (`VAR="$(cat f)" cmd`): the process is the command's own.
  const code = block.code.trim();
  const assignments = /^(?:[A-Za-z_][A-Za-z0-9_]*=(?:"[^"]*"|'[^']*'|[^\s"']+)\s+)*/.exec(code)![0];
  const proc = spawn('sh', ['-c', `${assignments}exec ${code.slice(assignments.length)}`], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const started = { code: block.code, proc, output: () => out, exited };
  const { ready } = block;
  if (ready) await until(() => out.includes(ready) || proc.exitCode !== null, `"${ready}" from ${block.code.trim()}`, 20_000);
  if (proc.exitCode !== null) throw new Error(`${block.code.trim()} exited with ${proc.exitCode}:\n${out}`);
  return started;
}

export interface ShellRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout of each block, in the order of the blocks passed in. */
  perBlock: string[];
  /** The background blocks, in the order they were started. */
  started: Started[];
}

/**
 * Runs the blocks in order: run blocks in one `sh -e` (one terminal), node blocks as ES modules,
 * and at a background block the shell waits until the block has been started in a terminal of
 * its own and found ready. `dir` holds the script and the ready flags.
 */
export async function runBlocks(blocks: Block[], opts: { cwd: string; env: NodeJS.ProcessEnv; dir: string; name: string }): Promise<ShellRun> {
  let script = 'set -e\n';
  const background: Block[] = [];
  blocks.forEach((block, i) => {
    script += `echo "::block ${i}"\n`;
    if (block.kind === 'run') script += `${block.code}\n`;
    else if (block.kind === 'node') {
      const file = path.join(opts.dir, `${opts.name}-${i}.mjs`);
      writeFileSync(file, block.code);
      script += `"${process.execPath}" "${file}"\n`;
    } else {
      const n = background.push(block) - 1;
      script += `echo "::background ${n}"\nwhile [ ! -f "${opts.dir}/.${opts.name}-ready-${n}" ]; do sleep 0.05; done\n`;
    }
  });
  script += `echo "::block ${blocks.length}"\n`;
  const scriptFile = path.join(opts.dir, `${opts.name}.sh`);
  writeFileSync(scriptFile, script);

  const started: Started[] = [];
  const shell = spawn('sh', [scriptFile], { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const pending: Array<Promise<void>> = [];
  let failed: unknown = null;
  shell.stdout.on('data', (c: Buffer) => {
    stdout += c.toString();
    for (const m of c.toString().matchAll(/::background (\d+)/g)) {
      const n = Number(m[1]);
      pending.push(
        startBackground(background[n]!, opts.cwd, opts.env).then((s) => {
          started.push(s);
          writeFileSync(path.join(opts.dir, `.${opts.name}-ready-${n}`), '');
        }, (e: unknown) => {
          failed = e;
          shell.kill();
        }),
      );
    }
  });
  shell.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => shell.once('exit', resolve));
  await Promise.all(pending);
  if (failed) throw failed;
  const perBlock = blocks.map((_, i) => {
    const from = stdout.indexOf(`::block ${i}\n`);
    const to = stdout.indexOf(`::block ${i + 1}\n`);
    return from < 0 ? '' : stdout.slice(from + `::block ${i}\n`.length, to < 0 ? undefined : to).replace(/::background \d+\n/g, '');
  });
  return { code, stdout, stderr, perBlock, started };
}
