import { readFileSync } from 'node:fs';

/** A file's text up to its first NUL byte: what a reader of a zero-filled journal takes as its data. */
export function dataOf(file: string): string {
  const bytes = readFileSync(file);
  const nul = bytes.indexOf(0);
  return bytes.subarray(0, nul === -1 ? bytes.length : nul).toString('utf8');
}
