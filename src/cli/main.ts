/**
 * What `bin/run.js` runs: oclif's `execute`, and two things done before oclif has loaded (bundled
 * as `dist/cli/run.js`, see write-bundle.ts; `bin/dev.js`, which runs the sources, calls oclif
 * directly).
 *
 * oclif takes some 45 ms to load and read its configuration on this kind of machine, about as
 * long as Node itself takes to start:
 * - `svcq --version` prints what oclif would (`svcq/0.1.0 linux-x64 node-v20.20.2`) without it;
 * - `svcq serve` starts its server thread first, which loads the server while oclif loads here
 *   (prestartServerThread in server-thread.ts).
 */
import os from 'node:os';
import { readFile } from 'node:fs/promises';

/** Runs svcq with the arguments of this process; `bin` is the `import.meta.url` of bin/run.js. */
export async function main(bin: string): Promise<void> {
  const first = process.argv[2];
  if (first === '--version') return printVersion(new URL('../package.json', bin));
  if (first === 'serve') await import('../http/server-thread.js').then((m) => m.prestartServerThread());
  // Loaded here, not above: --version goes without it. oclif is a CommonJS module, whose
  // exports import() gives as its default (esbuild gives nothing else).
  const { execute } = (await import('@oclif/core')).default;
  await execute({ dir: bin });
}

/**
 * oclif's answer to `--version` as the first argument (its `config.userAgent`): the package's name
 * and version, the platform (`wsl` under the Windows Subsystem for Linux, as oclif tells it with
 * wsl-utils) and architecture (`x86` for ia32), and Node's version.
 */
async function printVersion(packageJson: URL): Promise<void> {
  const { name, version } = JSON.parse(await readFile(packageJson, 'utf8')) as { name: string; version?: string };
  const platform = (await import('wsl-utils')).isWsl ? 'wsl' : os.platform();
  const arch = os.arch() === 'ia32' ? 'x86' : os.arch();
  process.stdout.write(`${name}/${version || '0.0.0'} ${platform}-${arch} node-${process.version}\n`);
}
