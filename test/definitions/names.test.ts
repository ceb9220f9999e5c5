import { expect } from 'chai';
import { isHost, isName, isQueueName, parseDefinitionPath } from '../../src/definitions/names.js';

describe('names and definition paths (decisions §2.1)', () => {
  it('accepts lowercase DNS names and IPv4 literals as hosts, and nothing else', () => {
    for (const ok of ['a', 'jobs.example.com', 'x-1.example', '10.0.0.1', `${'a'.repeat(63)}.com`]) expect(isHost(ok), ok).to.equal(true);
    for (const bad of ['', 'Jobs.example.com', 'a..b', '.a', 'a.', '-a.com', 'a-.com', 'a_b.com', '_svcq', 'a:80', `${'a'.repeat(64)}.com`, 'a/b', '..', `${'a.'.repeat(127)}ab`]) {
      expect(isHost(bad), bad).to.equal(false);
    }
  });

  it('a host is at most 253 characters (decisions §2.1)', () => {
    const label = 'a'.repeat(63);
    const of = (last: number): string => `${label}.${label}.${label}.${'b'.repeat(last)}`;
    expect(of(61)).to.have.length(253);
    expect(isHost(of(61))).to.equal(true);
    expect(isHost(of(62))).to.equal(false);
  });

  it('accepts names of ^[a-z0-9][a-z0-9_-]{0,63}$ only, and reserves the queue name api', () => {
    for (const ok of ['a', '0', 'a_b-c', 'a'.repeat(64)]) expect(isName(ok), ok).to.equal(true);
    for (const bad of ['', '_a', '-a', 'A', 'a.b', 'a b', 'a'.repeat(65), 'é']) expect(isName(bad), bad).to.equal(false);
    expect(isQueueName('api')).to.equal(false);
    expect(isQueueName('apis')).to.equal(true);
  });

  it('parses the two path shapes into host, kind and name', () => {
    expect(parseDefinitionPath('jobs.example.com/svc-queues/thumbs.json')).to.deep.equal({ host: 'jobs.example.com', kind: 'queue', name: 'thumbs', path: 'jobs.example.com/svc-queues/thumbs.json' });
    expect(parseDefinitionPath('10.0.0.1/svc-users/alice.json')).to.deep.equal({ host: '10.0.0.1', kind: 'user', name: 'alice', path: '10.0.0.1/svc-users/alice.json' });
  });

  it('refuses every other shape with one sentence, control characters replaced', () => {
    const bad = ['', '../svc-queues/a.json', 'h/svc-queues/../a.json', '/h/svc-queues/a.json', 'h//svc-queues/a.json', 'h/svc-queues/a.json/', 'h/svc-queues/a.txt', 'h/svc-items/a.json', 'h\\svc-queues\\a.json', 'h/svc-queues/api.json', 'h/svc-users/public.json', 'h/svc-queues/a\u0000.json'];
    for (const raw of bad) {
      const parsed = parseDefinitionPath(raw);
      expect(parsed, raw).to.have.property('error').that.is.a('string');
      expect([...(parsed as { error: string }).error].some((c) => c.charCodeAt(0) < 0x20)).to.equal(false);
    }
    expect(parseDefinitionPath(['a', 'b'])).to.deep.equal({ error: 'path is given more than once: send exactly one path=<host>/svc-queues/<name>.json or <host>/svc-users/<name>.json' });
    expect(parseDefinitionPath(undefined)).to.have.property('error').that.includes('path is required');
  });
});
