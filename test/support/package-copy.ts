import { cpSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { REPO } from './server.js';

/**
 * Copies the built package (bin, dist, package.json and, unless told, the manifest) into `dir`,
 * node_modules linked: a test can then take a file away without touching the checkout others use.
 */
export function copyBuiltPackage(dir: string, options: { manifest?: boolean } = {}): string {
  const parts = ['bin', 'dist', 'package.json', ...(options.manifest === false ? [] : ['oclif.manifest.json'])];
  for (const part of parts) cpSync(path.join(REPO, part), path.join(dir, part), { recursive: true });
  symlinkSync(path.join(REPO, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  return path.join(dir, 'bin/run.js');
}
