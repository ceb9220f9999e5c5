import { statSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { FileMasterTokenStore, resolveMasterToken, type MasterTokenStore } from '../../src/http/master-token.js';
import { cleanupTemp, tempDir } from '../support/server.js';

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
});
