import { createHash } from 'node:crypto';
import { expect } from 'chai';
import type { DefinitionStore, StoredDefinition } from '../../src/definitions/definition-store.js';
import { parseDefinitionPath, type DefinitionPath } from '../../src/definitions/names.js';
import { DefinitionRegistry } from '../../src/definitions/registry.js';

/** Definitions kept in a map: what a database table will be, with no file anywhere. */
class MemoryDefinitions implements DefinitionStore {
  readonly bytes = new Map<string, Buffer>();
  async list(): Promise<StoredDefinition[]> {
    return [...this.bytes.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([p, bytes]) => ({ at: at(p), bytes }));
  }
  async put(where: DefinitionPath, bytes: Buffer): Promise<void> {
    this.bytes.set(where.path, bytes);
  }
  async delete(where: DefinitionPath): Promise<boolean> {
    return this.bytes.delete(where.path);
  }
}

function at(p: string): DefinitionPath {
  const parsed = parseDefinitionPath(p);
  if ('error' in parsed) throw new Error(parsed.error);
  return parsed;
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('definitions behind a DefinitionStore (decisions §2.4, interface §4.5)', () => {
  it('the registry loads, puts and deletes through the store it is given, and its manifest hashes the stored bytes', async () => {
    {
      const store = new MemoryDefinitions();
      const queue = Buffer.from('{"leaseSeconds": 5}\n');
      store.bytes.set('h.example.com/svc-queues/jobs.json', queue);
      const broken = Buffer.from('{"leaseSeconds": "soon"}');
      store.bytes.set('h.example.com/svc-queues/broken.json', broken);
      const warnings: string[] = [];
      const registry = await DefinitionRegistry.load(store, (l) => warnings.push(l));
      expect(registry.queue('h.example.com', 'jobs')?.config.leaseMs).to.equal(5000);
      expect(registry.queue('h.example.com', 'broken')).to.equal(undefined);
      expect(warnings.join('\n')).to.match(/broken\.json/);

      const user = Buffer.from('{"svc-user-name":"ann","tokenSha256":"' + sha(Buffer.from('t')) + '"}');
      await registry.put(at('h.example.com/svc-users/ann.json'), user);
      expect(store.bytes.get('h.example.com/svc-users/ann.json')).to.deep.equal(user);
      expect(registry.userForToken('h.example.com', 't')).to.equal('ann');
      // Users are looked up by their token's digest, an index kept up to date with every change.
      const userWith = (name: string, token: string): Buffer => Buffer.from(`{"svc-user-name":"${name}","tokenSha256":"${sha(Buffer.from(token))}"}`);
      await registry.put(at('h.example.com/svc-users/ann.json'), userWith('ann', 't2'));
      expect(registry.userForToken('h.example.com', 't')).to.equal(undefined);
      expect(registry.userForToken('h.example.com', 't2')).to.equal('ann');
      await registry.put(at('h.example.com/svc-users/bob.json'), userWith('bob', 'b'));
      expect(registry.userForToken('h.example.com', 'b')).to.equal('bob');
      expect(registry.userForToken('other.example.com', 'b')).to.equal(undefined);
      expect(await registry.delete(at('h.example.com/svc-users/bob.json'))).to.equal(true);
      expect(registry.userForToken('h.example.com', 'b')).to.equal(undefined);
      await registry.put(at('h.example.com/svc-users/ann.json'), user);
      expect(registry.userForToken('h.example.com', 't')).to.equal('ann');
      // Two users with one token: the first defined answers to it, the other once the first is gone.
      await registry.put(at('h.example.com/svc-users/cy.json'), userWith('cy', 't'));
      expect(registry.userForToken('h.example.com', 't')).to.equal('ann');
      expect(await registry.delete(at('h.example.com/svc-users/ann.json'))).to.equal(true);
      expect(registry.userForToken('h.example.com', 't')).to.equal('cy');
      expect(await registry.delete(at('h.example.com/svc-users/cy.json'))).to.equal(true);
      expect(registry.userForToken('h.example.com', 't')).to.equal(undefined);
      await registry.put(at('h.example.com/svc-users/ann.json'), user);
      // A stored definition that does not parse is not live, but it is stored: the manifest lists it, so that sync replaces or deletes it.
      expect(registry.manifest()).to.deep.equal({ 'h.example.com/svc-queues/broken.json': sha(broken), 'h.example.com/svc-queues/jobs.json': sha(queue), 'h.example.com/svc-users/ann.json': sha(user) });

      expect(await registry.delete(at('h.example.com/svc-queues/jobs.json'))).to.equal(true);
      expect(await registry.delete(at('h.example.com/svc-queues/jobs.json'))).to.equal(false);
      expect(registry.queue('h.example.com', 'jobs')).to.equal(undefined);
      expect([...store.bytes.keys()].sort()).to.deep.equal(['h.example.com/svc-queues/broken.json', 'h.example.com/svc-users/ann.json']);

      // Replaced by a valid definition, it is live; deleted, it leaves the manifest; removed from the store behind the registry's back, a refresh drops it too.
      await registry.put(at('h.example.com/svc-queues/broken.json'), queue);
      expect(registry.queue('h.example.com', 'broken')?.config.leaseMs).to.equal(5000);
      store.bytes.set('h.example.com/svc-queues/broken.json', broken);
      await registry.refresh();
      expect(registry.queue('h.example.com', 'broken')).to.equal(undefined);
      expect(registry.manifest()).to.have.property('h.example.com/svc-queues/broken.json', sha(broken));
      store.bytes.delete('h.example.com/svc-queues/broken.json');
      await registry.refresh();
      expect(registry.manifest()).to.deep.equal({ 'h.example.com/svc-users/ann.json': sha(user) });
    }
  });
});
