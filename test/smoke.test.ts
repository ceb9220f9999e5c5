import { expect } from 'chai';
import { request } from './support/http.js';
import { cleanupTemp, startServer, serverForSuite } from './support/server.js';

describe('svcq serve (smoke)', () => {
  const server = serverForSuite();

  it('answers GET /api/version with { api: 2 } for the master token (interface §4.5)', async () => {
    const reply = await request(server.url, '/api/version', { token: server.masterToken });
    expect(reply.status).to.equal(200);
    expect(reply.json).to.deep.equal({ api: 2 });
  });

  it('runs from the TypeScript sources too (bin/dev.js): the server thread loads its .ts entry, answers, and exits 0 on SIGTERM', async () => {
    const dev = await startServer({ fromSources: true });
    const reply = await request(dev.url, '/api/version', { token: dev.masterToken });
    expect(reply.json).to.deep.equal({ api: 2 });
    expect(await dev.stop('SIGTERM')).to.equal(0);
    cleanupTemp(dev.root);
  });

  it('exits 0 on SIGTERM (decisions §1.1)', async () => {
    const other = await startServer();
    expect(await other.stop('SIGTERM')).to.equal(0);
    cleanupTemp(other.root);
  });
});
