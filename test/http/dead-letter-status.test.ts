import { expect } from 'chai';
import { serverForSuite } from '../support/server.js';
import { defineQueue, PUBLIC_ACCESS, QueueApi, uniqueName } from './queue-api.js';

const HOST = 'dead-letters.example.com';

describe('the item status answer of a dead letter and of its original (decisions §8.6, black box)', () => {
  const server = serverForSuite();

  it('names the copy on the failed item, and the source with its error as JSON on the copy; neither field on other items', async () => {
    const dlName = uniqueName('dl');
    const name = uniqueName('q');
    await defineQueue(server, HOST, dlName, { access: PUBLIC_ACCESS });
    await defineQueue(server, HOST, name, { access: PUBLIC_ACCESS, maxAttempts: 1, deadLetter: dlName });
    const q = new QueueApi(server, HOST, name);
    const dl = new QueueApi(server, HOST, dlName);
    const id = await q.post({ job: 1 });
    const plain = await q.post({ job: 2 });
    await q.claim({ worker: 'w' });
    expect(await q.submit(id, 'error', { code: 'E1', detail: [1, 2] })).to.deep.equal({ ok: true, accepted: true, status: 'failed' });
    // request() checks every answer against docs/openapi.yaml (closed schemas).
    const failed = await q.fetch(id);
    expect(failed.deadLetterId).to.match(/^[0-9a-f]{16}$/);
    expect(failed).to.not.have.property('source');
    const copy = await dl.fetch(failed.deadLetterId as string);
    expect(copy).to.deep.include({ status: 'pending', postedBy: 'dead-letter', attempts: 0 });
    expect(copy.source).to.deep.equal({ queue: name, id, status: 'failed', attempts: 1, error: { code: 'E1', detail: [1, 2] } });
    expect(copy).to.not.have.property('deadLetterId');
    const other = await q.fetch(plain);
    expect(other).to.not.have.property('deadLetterId');
    expect(other).to.not.have.property('source');
  });
});
