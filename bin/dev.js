#!/usr/bin/env -S node --import tsx --no-warnings
import { readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Config, flush, handle, run, settings } from '@oclif/core';

// `npm run build` writes oclif.manifest.json from the built commands, and oclif lists commands
// from it when it is there, here too. Run from the sources, a command added, removed or changed
// since the last build (its flags and help may come from src/) would be listed as it was: a
// manifest older than any file or folder under commands/ or src/ is removed, and oclif reads the
// commands themselves.
const root = new URL('..', import.meta.url);
const manifest = new URL('oclif.manifest.json', root);
const builtAt = statSync(manifest, { throwIfNoEntry: false })?.mtimeMs;
// A folder's own time changes when a file in it is added, removed or renamed.
const newer = (dir) =>
  statSync(dir).mtimeMs > builtAt ||
  readdirSync(dir, { withFileTypes: true }).some((e) => (e.isDirectory() ? newer(new URL(`${e.name}/`, dir)) : statSync(new URL(e.name, dir)).mtimeMs > builtAt));
if (builtAt !== undefined && (newer(new URL('commands/', root)) || newer(new URL('src/', root)))) rmSync(manifest, { force: true });

// Commands and hooks from the sources, through tsx. package.json names those `npm run build`
// bundles into dist/cli/; the compiled dist/commands/ and dist/src/cli/ are what oclif maps back
// to commands/ and src/cli/. The manifest lists the commands, but names each one's bundled file,
// which oclif would load: without that name it loads the command from the folder.
const pjson = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'));
pjson.oclif.commands = './dist/commands';
pjson.oclif.hooks = { init: './dist/src/cli/init-hook.js', command_not_found: './dist/src/cli/not-found-hook.js' };
// What execute({ development: true }) does, around a configuration of our own.
process.env.NODE_ENV = 'development';
settings.debug = true;
const config = await Config.load({ root: fileURLToPath(root), pjson });
for (const command of Object.values(config.rootPlugin.manifest.commands)) delete command.relativePath;
await run(process.argv.slice(2), config).then(
  () => flush(),
  (err) => handle(err),
);
