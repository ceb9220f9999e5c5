#!/usr/bin/env -S node --import tsx --no-warnings
import { readdirSync, rmSync, statSync } from 'node:fs';
import { execute } from '@oclif/core';

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

await execute({ development: true, dir: import.meta.url });
