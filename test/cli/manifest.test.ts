import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { copyBuiltPackage } from '../support/package-copy.js';
import { cleanupTemp, REPO, tempDir } from '../support/server.js';

interface ManifestCommand {
  flags: Record<string, unknown>;
  args: Record<string, unknown>;
  summary?: string;
  description?: string;
  isESM?: boolean;
  relativePath?: string[];
}

type CommandClass = { baseFlags?: Record<string, unknown>; flags?: Record<string, unknown>; args?: Record<string, unknown>; summary?: string; enableJsonFlag?: boolean; run?: unknown };

/** Each command's id as oclif names it from its file under `dir` (`logs/show.ts` is `logs:show`, `logs/index.ts` is `logs`), and the file. */
function commandFiles(dir: string, extension: RegExp, prefix = ''): Array<[string, string]> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry): Array<[string, string]> => {
    if (entry.isDirectory()) return commandFiles(path.join(dir, entry.name), extension, `${prefix}${entry.name}:`);
    const m = extension.exec(entry.name);
    if (!m || entry.name.endsWith('.d.ts')) return [];
    return [[m[1] === 'index' ? prefix.slice(0, -1) : `${prefix}${m[1]}`, path.join(dir, entry.name)]];
  });
}

describe('the command manifest written by npm run build (every svcq start lists commands from it, and loads the command run from the file it names)', () => {
  const manifest = JSON.parse(readFileSync(path.join(REPO, 'oclif.manifest.json'), 'utf8')) as { version: string; commands: Record<string, ManifestCommand> };
  const sources = commandFiles(path.join(REPO, 'commands'), /^(.+)\.tsx?$/);

  it('lists exactly the commands under commands/, at the package version: none missing, none left over', () => {
    const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { version: string };
    expect(manifest.version).to.equal(pkg.version);
    expect(Object.keys(manifest.commands).sort()).to.deep.equal(sources.map(([id]) => id).sort());
    // What oclif lists commands from when there is no manifest (package.json `oclif.commands`).
    expect(commandFiles(path.join(REPO, 'dist/cli/commands'), /^(.+)\.js$/).map(([id]) => id).sort()).to.deep.equal(sources.map(([id]) => id).sort());
  });

  it('names, for each command, its file in the bundle (dist/cli/commands/), which holds that command: the same flags, arguments and summary as its source', async () => {
    for (const [id, source] of sources) {
      const listed = manifest.commands[id]!;
      expect(listed.isESM, `${id}: isESM`).to.equal(true);
      expect(listed.relativePath?.slice(0, 3), `${id}: relativePath`).to.deep.equal(['dist', 'cli', 'commands']);
      const bundled = path.join(REPO, ...listed.relativePath!);
      expect(existsSync(bundled), `${id}: ${bundled}`).to.equal(true);
      const { default: command } = (await import(pathToFileURL(bundled).href)) as { default: CommandClass };
      const { default: fromSource } = (await import(pathToFileURL(source).href)) as { default: CommandClass };
      expect(typeof command.run, `${id}: a command class`).to.equal('function');
      for (const [what, c] of [['bundled', command], ['source', fromSource]] as const) {
        expect(Object.keys(listed.flags).sort(), `${id}: flags (${what})`).to.deep.equal(Object.keys({ ...c.baseFlags, ...c.flags, ...(c.enableJsonFlag ? { json: true } : {}) }).sort());
        expect(Object.keys(listed.args).sort(), `${id}: arguments (${what})`).to.deep.equal(Object.keys({ ...c.args }).sort());
        expect(listed.summary, `${id}: summary (${what})`).to.equal(c.summary);
      }
    }
  });

  it('without it (a copy of the package without oclif.manifest.json), every command still runs from the bundle: a command that exits 1 says one sentence, not oclif\'s "EEXIT"', () => {
    const dir = tempDir();
    try {
      const bin = copyBuiltPackage(dir, { manifest: false });
      const run = spawnSync(process.execPath, [bin, 'version', '--url', 'http://127.0.0.1:1'], { encoding: 'utf8' });
      expect(run.status).to.equal(1);
      expect(run.stdout).to.match(/^svcq \S+ \(api \d+\); the server could not be asked\n$/);
      expect(run.stderr).to.equal('svcq: cannot reach http://127.0.0.1:1 (connection refused)\n');
    } finally {
      cleanupTemp(dir);
    }
  });
});
