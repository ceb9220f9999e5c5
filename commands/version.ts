import { BaseCommand } from '../src/cli/base-command.js';
import { CLIENT_API, ClientError } from '../src/client/client.js';

export type VersionReport = { client: string; api: number; server: { api: number } } | { client: string; api: number; server: null; error: string };

export default class Version extends BaseCommand<typeof Version> {
  static override summary = "Print this client's version and the server's API version.";
  static override description = "The client's version is printed even when the server cannot be asked (then the command says why and exits 1; with --json the server is null and error says why).";
  static override examples = ['<%= config.bin %> version --token $SVCQ_TOKEN'];

  async run(): Promise<VersionReport> {
    const mine = `svcq ${this.config.version} (api ${CLIENT_API})`;
    let server: { api: number };
    try {
      server = await this.client().version();
    } catch (err) {
      if (!(err instanceof ClientError)) throw err;
      // The client's own version is known without the server: print it, then say why the server could not be asked.
      if (this.jsonEnabled()) this.logJson({ client: this.config.version, api: CLIENT_API, server: null, error: err.message });
      else {
        this.log(`${mine}; the server could not be asked`);
        process.stderr.write(`svcq: ${err.message}\n`);
      }
      return this.exit(1);
    }
    if (server.api !== CLIENT_API) this.warn(`the server speaks API ${server.api}, this client ${CLIENT_API}`);
    this.log(`${mine}; server api ${server.api}`);
    return { client: this.config.version, api: CLIENT_API, server };
  }
}
