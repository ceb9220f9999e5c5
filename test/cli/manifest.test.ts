import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO } from '../support/server.js';

interface ManifestCommand {
  flags: Record<string, unknown>;
  args: Record<string, unknown>;
  summary?: string;
  description?: string;
}

/** Each built command's id as oclif names it from its file under `dir` (`logs/show.js` is `logs:show`, `logs/index.js` is `logs`), and the file. */
function builtCommands(dir: string, prefix = ''): Array<[string, string]> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry): Array<[string, string]> => {
    if (entry.isDirectory()) return builtCommands(path.join(dir, entry.name), `${prefix}${entry.name}:`);
    const m = /^(.+)\.js$/.exec(entry.name);
    if (!m) return [];
    return [[m[1] === 'index' ? prefix.slice(0, -1) : `${prefix}${m[1]}`, path.join(dir, entry.name)]];
  });
}

describe('the command manifest written by npm run build (every svcq start lists commands from it)', () => {
  const built = path.join(REPO, 'dist/commands');
  const manifest = JSON.parse(readFileSync(path.join(REPO, 'oclif.manifest.json'), 'utf8')) as { version: string; commands: Record<string, ManifestCommand> };

  it('lists exactly the built commands, at the package version: none missing, none left over', () => {
    const pkg = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { version: string };
    expect(manifest.version).to.equal(pkg.version);
    expect(Object.keys(manifest.commands).sort()).to.deep.equal(builtCommands(built).map(([id]) => id).sort());
  });

  it("holds each command's flags, arguments and summary as the command itself declares them", async () => {
    for (const [id, file] of builtCommands(built)) {
      const { default: command } = (await import(pathToFileURL(file).href)) as { default: { baseFlags?: Record<string, unknown>; flags?: Record<string, unknown>; args?: Record<string, unknown>; summary?: string; enableJsonFlag?: boolean } };
      const listed = manifest.commands[id]!;
      expect(Object.keys(listed.flags).sort(), `${id}: flags`).to.deep.equal(Object.keys({ ...command.baseFlags, ...command.flags, ...(command.enableJsonFlag ? { json: true } : {}) }).sort());
      expect(Object.keys(listed.args).sort(), `${id}: arguments`).to.deep.equal(Object.keys({ ...command.args }).sort());
      expect(listed.summary, `${id}: summary`).to.equal(command.summary);
    }
  });
});
