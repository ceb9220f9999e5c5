/**
 * Writes `oclif.manifest.json` at the package root: every command's id, flags, arguments and help,
 * as oclif reads them. Run by `npm run build`, after the compiler, from `dist/`.
 *
 * Without it, oclif imports every command module (and everything each one imports: the terminal
 * UI, ajv, the PostgreSQL driver) to list them, on every start of `svcq`, whichever command runs.
 * With it, only the command asked for is loaded: `svcq queues --help` starts in about half the
 * time. The manifest is made by oclif's own loader, with the manifest ignored, so it holds what
 * oclif would have found; being written at each build, it follows the built commands.
 *
 * The commands are those of the bundle (write-bundle.ts), written just before: each command's
 * `relativePath`, the file oclif loads to run it, is one of `dist/cli/commands/`. bin/dev.js,
 * which runs the sources, takes the list and loads each command from commands/ instead.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Plugin } from '@oclif/core';

/** The package root: this file runs from `<root>/dist/src/cli/`. */
const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const MANIFEST_FILE = path.join(PACKAGE_ROOT, 'oclif.manifest.json');

async function writeManifest(): Promise<number> {
  const plugin = new Plugin({ root: PACKAGE_ROOT, isRoot: true, ignoreManifest: true, errorOnManifestCreate: true, respectNoCacheDefault: true });
  await plugin.load();
  writeFileSync(MANIFEST_FILE, `${JSON.stringify(plugin.manifest)}\n`);
  return Object.keys(plugin.manifest.commands).length;
}

const count = await writeManifest();
process.stdout.write(`oclif.manifest.json: ${count} commands\n`);
