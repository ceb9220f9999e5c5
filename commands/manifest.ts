import { BaseCommand } from '../src/cli/base-command.js';
import type { Manifest } from '../src/definitions/manifest.js';

export default class ManifestCommand extends BaseCommand<typeof ManifestCommand> {
  static override summary = 'Print the sha256 of every stored queue and user definition.';
  static override description = 'One line per definition, "<sha256>  <path>", the form sha256sum prints; --json prints the manifest object.';
  static override examples = ['<%= config.bin %> manifest --token $SVCQ_TOKEN'];

  async run(): Promise<Manifest> {
    const manifest = await this.client().manifest();
    for (const [path, sha] of Object.entries(manifest)) this.log(`${sha}  ${path}`);
    if (Object.keys(manifest).length === 0 && !this.jsonEnabled()) process.stderr.write('svcq: no definitions stored\n');
    return manifest;
  }
}
