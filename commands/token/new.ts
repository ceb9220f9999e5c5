import { Command, Flags } from '@oclif/core';
import { jsonError, UserError } from '../../src/cli/base-command.js';
import { newUserToken, type NewToken } from '../../src/definitions/token.js';

export default class TokenNew extends Command {
  static override summary = 'Make a fresh random user token and the user definition that holds its sha256.';
  static override description = `Prints the token (give it to the user, keep it secret) and, with --user, the line to save as <host>/svc-users/NAME.json.
The server keeps only the sha256. Nothing is sent anywhere.`;
  static override examples = ['<%= config.bin %> token new --user alice', '<%= config.bin %> token new --user alice --json'];
  static override enableJsonFlag = true;

  static override flags = {
    user: Flags.string({ description: 'user name to write the definition for' }),
  };

  async run(): Promise<NewToken> {
    const { flags } = await this.parse(TokenNew);
    const made = newUserToken(flags.user);
    if ('error' in made) throw new UserError(made.error);
    this.log(`token:  ${made.token}`);
    if (made.definition) {
      this.log(JSON.stringify(made.definition));
      if (!this.jsonEnabled()) process.stderr.write(`save the second line as <host>/svc-users/${flags.user}.json, then run svcq sync\n`);
    } else {
      this.log(`sha256: ${made.tokenSha256}`);
    }
    return made;
  }

  /** One sentence on stderr (`{ error }` there with --json), as every svcq command does. */
  protected override async catch(err: Error & { exitCode?: number; oclif?: { exit?: number } }): Promise<unknown> {
    if (!(err instanceof UserError)) return super.catch(err);
    if (this.jsonEnabled()) jsonError(err.message);
    else process.stderr.write(`svcq: ${err.message}\n`);
    return this.exit(err.exitCode);
  }
}
