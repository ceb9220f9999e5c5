#!/usr/bin/env -S node --import tsx --no-warnings
import { readdirSync, rmSync, statSync } from 'node:fs';
import { execute } from '@oclif/core';

// `npm run build` writes oclif.manifest.json from the built commands, and oclif lists commands
// from it when it is there, here too. Run from the sources, a command added or changed since the
// last build would be missing or shown with its old help: a manifest older than any command
// source is removed, and oclif reads the commands themselves.
const root = new URL('..', import.meta.url);
const manifest = new URL('oclif.manifest.json', root);
const builtAt = (() => {
  try {
    return statSync(manifest).mtimeMs;
  } catch {
    return undefined;
  }
})();
const newer = (dir) => readdirSync(dir, { withFileTypes: true }).some((e) => {
  const file = new URL(e.isDirectory() ? `${e.name}/` : e.name, dir);
  return e.isDirectory() ? newer(file) : statSync(file).mtimeMs > builtAt;
});
if (builtAt !== undefined && newer(new URL('commands/', root))) rmSync(manifest, { force: true });

await execute({ development: true, dir: import.meta.url });
