import { expect } from 'chai';
import { SvcqClient } from '../../src/client/index.js';
import { sha256Hex } from '../http/queue-api.js';
import { cleanupTemp, startServer } from '../support/server.js';

const HOST = 'jobs.example.com';
const TOKEN = 'resizer-token-0123456789abcdef0123';

describe('the client library under faults (docs/client.md: Errors, Time and abandoning)', function () {
  this.timeout(60_000);

  it('reaches a server at an IPv6 address, written in brackets as a URL writes it and as svcq serve --bind ::1 prints it (docs/client.md: Calls)', async () => {
    const server = await startServer({ port: 47160, args: ['--bind', '::1'] });
    try {
      expect(server.url).to.equal('http://[::1]:47160');
      const master = new SvcqClient({ url: server.url, token: server.masterToken });
      expect(await master.version()).to.deep.equal({ api: 2 });
      await master.putDefinition(`${HOST}/svc-users/resizer.json`, Buffer.from(JSON.stringify({ 'svc-user-name': 'resizer', tokenSha256: sha256Hex(TOKEN) })));
      await master.putDefinition(`${HOST}/svc-queues/thumbnails.json`, Buffer.from(JSON.stringify({ access: { post: ['resizer'], fetch: ['resizer'], work: ['resizer'] } })));
      const c = new SvcqClient({ url: server.url, host: HOST, token: TOKEN });
      const { id } = await c.post('thumbnails', { n: 1 });
      expect((await c.item('thumbnails', id)).status).to.equal('pending');
    } finally {
      await server.stop();
      cleanupTemp(server.root);
    }
  });
});
