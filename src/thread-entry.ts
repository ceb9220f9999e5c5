import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

/**
 * How to start a worker thread on a module of ours, built or not. Run from the TypeScript sources
 * (bin/dev.js, the tests), the thread needs tsx registered before it can load the .ts module:
 * Node 20 does not carry the parent's loader hooks over to a worker. `sibling` is the module's
 * name beside `from` (an `import.meta.url`), without its extension.
 */
export function threadEntry(from: string, sibling: string): { entry: string | URL; eval: boolean } {
  if (!from.endsWith('.ts')) return { entry: new URL(`./${sibling}.js`, from), eval: false };
  const source = new URL(`./${sibling}.ts`, from).href;
  // Resolved through require: a source loaded by mocha is compiled to CommonJS, without import.meta.resolve.
  const tsx = pathToFileURL(createRequire(from).resolve('tsx/esm/api')).href;
  return { entry: `import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(source)}); });`, eval: true };
}
