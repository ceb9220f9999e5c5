import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { FileMasterTokenStore, resolveMasterToken, type MasterTokenStore } from '../../src/http/master-token.js';
import { runCli } from '../support/cli.js';
import { cleanupTemp, tempDir, tempDirEachTest } from '../support/server.js';

describe('the master token (decisions §1.1)', () => {
  it('comes from the flag or variable when given, and only otherwise from its store', async () => {
    let asked = 0;
    const store: MasterTokenStore = {
      readOrCreate: async () => {
        asked++;
        return { token: 'stored', created: false };
      },
    };
    expect(await resolveMasterToken('given', store)).to.deep.equal({ token: 'given', created: false });
    expect(asked).to.equal(0);
    expect((await resolveMasterToken(undefined, store)).token).to.equal('stored');
    expect((await resolveMasterToken('', store)).token).to.equal('stored');
    expect(asked).to.equal(2);
  });

  it('as a file: made once with mode 0600 and a 32-byte hex token, then read back', async () => {
    const home = path.join(tempDir(), '_svcq');
    try {
      const first = await new FileMasterTokenStore(home).readOrCreate();
      expect(first.created).to.equal(true);
      expect(first.token).to.match(/^[0-9a-f]{64}$/);
      expect(statSync(first.file!).mode & 0o777).to.equal(0o600);
      const again = await new FileMasterTokenStore(home).readOrCreate();
      expect(again).to.deep.equal({ token: first.token, file: first.file, created: false });
    } finally {
      cleanupTemp(path.dirname(home));
    }
  });

  describe('a token file a cut left short (durable through a power cut)', () => {
    let root = '';
    tempDirEachTest((d) => (root = d), 'svcq-token-');
    const fileOf = (): string => path.join(root, '_svcq', 'master-token');
    const put = (text: string): void => {
      mkdirSync(path.dirname(fileOf()), { recursive: true });
      writeFileSync(fileOf(), text);
    };

    for (const [what, text, says] of [
      ['empty', '', /is empty/],
      ['zeros (a cut after the size reached the disk and before the data)', '\0'.repeat(65), /holds zero bytes/],
      ['half of a token, without its line end', 'ab12'.repeat(8), /holds 32 of a token's 64 hex digits and no line end/],
    ] as const) {
      it(`is refused when ${what}, with a sentence naming the file and the way out, and left as it is`, async () => {
        put(text);
        await new FileMasterTokenStore(path.dirname(fileOf())).readOrCreate().then(
          () => expect.fail('a cut-short token file was taken'),
          (err: Error) => {
            expect(err.message).to.include(fileOf());
            expect(err.message).to.match(says);
            expect(err.message).to.match(/--master-token or SVCQ_MASTER_TOKEN, or remove the file/);
          },
        );
        expect(readFileSync(fileOf(), 'utf8')).to.equal(text);
      });
    }

    it('svcq serve does not start on an empty token file: one sentence on stderr, exit 1, no new token (the one operators saved is not silently replaced)', async () => {
      put('');
      const env: Record<string, string> = { SVCQ_MASTER_TOKEN: '' };
      const run = await runCli(['serve', '--root', root, '--port', '0'], { env });
      expect(run.code).to.equal(1);
      expect(run.stderr.trim().split('\n')).to.have.length(1);
      expect(run.stderr).to.match(/^svcq: cannot start: the master token file .*master-token is empty, as a start cut off before the token reached the disk leaves it; it is not replaced/);
      expect(readFileSync(fileOf(), 'utf8')).to.equal('');
    });

    it('a whole token an operator wrote there is taken as written, line end or not', async () => {
      put('my-own-master-token');
      expect((await new FileMasterTokenStore(path.dirname(fileOf())).readOrCreate()).token).to.equal('my-own-master-token');
      put('ab12'.repeat(16));
      expect((await new FileMasterTokenStore(path.dirname(fileOf())).readOrCreate()).token).to.equal('ab12'.repeat(16));
    });

    it('a start that fails before the store opens (a database that cannot be reached) leaves no token behind', async () => {
      const run = await runCli(['serve', '--root', root, '--port', '0', '--store', 'postgres://postgres@127.0.0.1:1/none'], { env: { SVCQ_MASTER_TOKEN: '' } });
      expect(run.code).to.equal(1);
      expect(run.stderr).to.match(/cannot start: cannot reach the PostgreSQL store/);
      expect(existsSync(fileOf())).to.equal(false);
    });
  });
});

