import { BaseCommand } from '../src/cli/base-command.js';
import { CLIENT_API } from '../src/client/client.js';

export default class Version extends BaseCommand<typeof Version> {
  static override summary = "Print this client's version and the server's API version.";
  static override examples = ['<%= config.bin %> version --token $SVCQ_TOKEN'];

  async run(): Promise<{ client: string; api: number; server: { api: number } }> {
    const server = await this.client().version();
    const result = { client: this.config.version, api: CLIENT_API, server };
    if (server.api !== CLIENT_API) this.warn(`the server speaks API ${server.api}, this client ${CLIENT_API}`);
    this.log(`svcq ${this.config.version} (api ${CLIENT_API}); server api ${server.api}`);
    return result;
  }
}
