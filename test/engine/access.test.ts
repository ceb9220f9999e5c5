import { expect } from 'chai';
import { accessPolicy, allows, resolveQueue } from '../../src/engine/config.js';

describe('access decisions (interface §5, decisions §2.2)', () => {
  it('"public" allows anyone, with or without a user', () => {
    expect(allows(accessPolicy({ post: 'public' }), 'post', null)).to.equal(true);
    expect(allows(accessPolicy({ post: 'public' }), 'post', 'alice')).to.equal(true);
  });

  it('a list allows only the users it names', () => {
    expect(allows(accessPolicy({ work: ['alice'] }), 'work', 'alice')).to.equal(true);
    expect(allows(accessPolicy({ work: ['alice'] }), 'work', 'bob')).to.equal(false);
    expect(allows(accessPolicy({ work: ['alice'] }), 'work', null)).to.equal(false);
  });

  it('an operation not listed is allowed to nobody', () => {
    expect(allows(accessPolicy({ post: 'public' }), 'fetch', null)).to.equal(false);
    expect(allows(accessPolicy({}), 'work', 'alice')).to.equal(false);
  });
});

describe('queue defaults (decisions §2.2)', () => {
  it('fills every default', () => {
    expect(resolveQueue({})).to.deep.equal({
      leaseMs: 60_000,
      maxAttempts: 3,
      retryDelayMs: 0,
      retryBackoff: 'fixed',
      retryDelayMaxMs: 86_400_000,
      retryJitter: 0,
      timeoutMs: null,
      retainFrom: 'finished',
      retainMs: 604_800_000,
      archivePayloads: false,
      schedules: [],
      maxActive: null,
      groupMaxActive: null,
      rateLimit: null,
      fairness: 'fifo',
      deadLetter: null,
      push: null,
      callback: null,
    });
  });
});
