/**
 * Writes `dist/cli/`: what `bin/run.js` runs, bundled by esbuild. Run by `npm run build`, after
 * the compiler and before the manifest, from `dist/`.
 *
 * Started from the compiled files, `svcq` spent most of its start finding and reading modules:
 * @oclif/core alone is some 150 files, and every package name is looked up folder by folder.
 * Bundled, a start reads a few files of one folder:
 *
 * - `run.js`: what `bin/run.js` calls (main.ts), oclif's `execute` and what comes before it;
 * - `init-hook.js` and `not-found-hook.js`, the hooks package.json `oclif.hooks` names;
 * - one file per command, `command.<id>.js` (`command.logs.show.js`): oclif loads the command
 *   run, and what that command imports, nothing else. It finds them through `commands/`, a
 *   folder laid out as `commands/` in the sources is (`commands/logs/show.js`), each file of which
 *   re-exports its command: package.json `oclif.commands` names that folder, and the manifest
 *   (write-manifest.ts) each command's file in it;
 * - `server-worker.js` and `stats-worker.js`, the two worker threads' entries;
 * - the chunks these share, and one for each module loaded only when it is needed (the terminal
 *   UI of `svcq top`, the definition schemas of `svcq sync`): esbuild splits at every `import()`.
 *
 * Every file of code is in that one folder (those of `commands/` only name one): the code that
 * starts a worker thread finds its entry as `./server-worker.js` beside itself (thread-entry.ts),
 * whichever file esbuild put that code in.
 * `bin/dev.js` runs the TypeScript sources instead.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/** The package root: this file runs from `<root>/dist/src/cli/`. */
const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
/** The bundle's folder, relative to the package root. */
const BUNDLE_DIR = 'dist/cli';

/**
 * Packages left to Node to load, from node_modules, when they are needed: the terminal UI of
 * `svcq top` (Ink and React, with a layout engine in WebAssembly); pg's optional native binding,
 * which pg looks for only when asked; and what oclif needs only in development (TypeScript, to
 * read tsconfig.json) or for the check that `DEFINE` turns off (semver).
 */
const EXTERNAL = ['ink', 'react', 'react/*', 'pg-native', 'typescript', 'semver'];

/**
 * oclif checks, as it loads, that Node satisfies its own package's `engines`, loading all of
 * semver to do so (a fifth of `svcq --version`); svcq's `engines` asks for more than oclif's, and
 * npm checks it at install.
 */
const DEFINE = { 'process.env.OCLIF_DISABLE_ENGINE_WARNING': '"1"' };

/**
 * Bundled CommonJS packages call `require` for Node's own modules: an ES module has none, so each
 * file makes one. A few read `__dirname` or `__filename` (to find their own package.json, inside
 * a try): they are given the bundle's.
 */
const BANNER = [
  `import { createRequire as __svcqCreateRequire } from 'node:module';`,
  `import { fileURLToPath as __svcqFileURLToPath } from 'node:url';`,
  `const require = __svcqCreateRequire(import.meta.url);`,
  `const __filename = __svcqFileURLToPath(import.meta.url);`,
  `const __dirname = __svcqFileURLToPath(new URL('.', import.meta.url));`,
].join('\n');

/** Each command's id as oclif names it from its file under `commands/` (`logs/show.ts` is `logs:show`, `logs/index.ts` is `logs`), and the file. */
export function commandSources(dir = path.join(PACKAGE_ROOT, 'commands'), prefix = ''): Array<[string, string]> {
  return readdirSync(dir, { withFileTypes: true })
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .flatMap((entry): Array<[string, string]> => {
      if (entry.isDirectory()) return commandSources(path.join(dir, entry.name), `${prefix}${entry.name}:`);
      const m = /^(.+)\.tsx?$/.exec(entry.name);
      if (!m || /\.(d|test|spec)$/.test(m[1]!)) return [];
      return [[m[1] === 'index' ? prefix.slice(0, -1) : `${prefix}${m[1]}`, path.relative(PACKAGE_ROOT, path.join(dir, entry.name))]];
    });
}

/** The name of the bundled file of the command `id` (in the bundle's folder). */
const bundledCommand = (id: string): string => `command.${id.replaceAll(':', '.')}.js`;

/** Writes the bundle; the number of files written. With `metafile`, esbuild's account of what went where is written there too. */
export async function writeBundle(metafile?: string): Promise<number> {
  const out = path.join(PACKAGE_ROOT, BUNDLE_DIR);
  rmSync(out, { recursive: true, force: true });
  const commands = commandSources();
  const result = await build({
    absWorkingDir: PACKAGE_ROOT,
    entryPoints: {
      run: 'src/cli/main.ts',
      'init-hook': 'src/cli/init-hook.ts',
      'not-found-hook': 'src/cli/not-found-hook.ts',
      ...Object.fromEntries(commands.map(([id, file]) => [path.basename(bundledCommand(id), '.js'), file])),
      'server-worker': 'src/http/server-worker.ts',
      'stats-worker': 'src/tools/stats-worker.ts',
    },
    outdir: out,
    entryNames: '[name]',
    chunkNames: 'chunk-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: EXTERNAL,
    define: DEFINE,
    banner: { js: BANNER },
    // Class and function names as in the sources (esbuild would rename a few that clash).
    keepNames: true,
    legalComments: 'none',
    logLevel: 'warning',
    metafile: metafile !== undefined,
  });
  if (metafile !== undefined) writeFileSync(metafile, JSON.stringify(result.metafile));
  for (const [id, file] of commands) {
    const at = path.join(out, file.replace(/\.tsx?$/, '.js'));
    mkdirSync(path.dirname(at), { recursive: true });
    writeFileSync(at, `export { default } from ${JSON.stringify(path.relative(path.dirname(at), path.join(out, bundledCommand(id))))};\n`);
  }
  return readdirSync(out).length;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const files = await writeBundle(process.argv[2]);
  process.stdout.write(`${BUNDLE_DIR}: ${files} files\n`);
}
