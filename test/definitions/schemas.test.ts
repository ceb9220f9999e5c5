import v8 from 'node:v8';
import vm from 'node:vm';
import { expect } from 'chai';
import { parseDefinitionPath, type DefinitionPath } from '../../src/definitions/names.js';
import { parseDefinition } from '../../src/definitions/schemas.js';
import { newUserToken } from '../../src/definitions/token.js';
import { sha256Hex } from '../../src/definitions/manifest.js';

const at = (p: string): DefinitionPath => parseDefinitionPath(p) as DefinitionPath;
const queue = at('h.example.com/svc-queues/q.json');
const user = at('h.example.com/svc-users/alice.json');
const errorOf = (where: DefinitionPath, body: string): string => (parseDefinition(where, body) as { error: string }).error;

describe('definition schemas (decisions §2.2, §2.3)', () => {
  it('accepts an empty queue definition and compiles an item schema that then validates items', () => {
    expect(parseDefinition(queue, '{}')).to.deep.include({ kind: 'queue', validator: null });
    const parsed = parseDefinition(queue, '{"schema":{"type":"object","required":["n"]}}');
    if (!('kind' in parsed) || parsed.kind !== 'queue') throw new Error('expected a queue');
    expect(parsed.validator!({ n: 1 })).to.equal(true);
    expect(parsed.validator!({})).to.equal(false);
  });

  it('names the field and what it must be, with the value received', () => {
    expect(errorOf(queue, '{"leaseSeconds":0}')).to.equal('h.example.com/svc-queues/q.json: leaseSeconds must be an integer from 1 to 86400 (got 0)');
    expect(errorOf(queue, '{"access":{"post":["ok","Bad"]}}')).to.equal('h.example.com/svc-queues/q.json: access.post must be "public" or an array of distinct user names (got ["ok","Bad"])');
    expect(errorOf(queue, '{"access":{"post":["a","a"]}}')).to.include('access.post must be');
    expect(errorOf(queue, '{"nope":1}')).to.equal('h.example.com/svc-queues/q.json: unknown field "nope"');
    expect(errorOf(queue, '{"access":{"nope":"public"}}')).to.equal('h.example.com/svc-queues/q.json: unknown field "nope" in access');
    expect(errorOf(user, '{"svc-user-name":"alice"}')).to.equal('h.example.com/svc-users/alice.json: missing field "tokenSha256"');
    expect(errorOf(user, `{"svc-user-name":"bob","tokenSha256":"${'0'.repeat(64)}"}`)).to.equal('h.example.com/svc-users/alice.json: svc-user-name "bob" must equal the file name "alice"');
  });

  it('takes each number field up to its bounds, both ends included (decisions §2.2)', () => {
    expect(parseDefinition(queue, '{"leaseSeconds":86400,"maxAttempts":1000,"retryDelaySeconds":86400}')).to.have.property('kind', 'queue');
    expect(parseDefinition(queue, '{"leaseSeconds":1,"maxAttempts":1,"retryDelaySeconds":0}')).to.have.property('kind', 'queue');
    expect(errorOf(queue, '{"leaseSeconds":86401}')).to.match(/leaseSeconds must be an integer from 1 to 86400 \(got 86401\)$/);
    expect(errorOf(queue, '{"retryDelaySeconds":-1}')).to.match(/retryDelaySeconds must be an integer from 0 to 86400 \(got -1\)$/);
    expect(errorOf(queue, '{"retryDelaySeconds":86401}')).to.match(/retryDelaySeconds must be an integer from 0 to 86400 \(got 86401\)$/);
    expect(errorOf(queue, '{"maxAttempts":0}')).to.match(/maxAttempts must be an integer from 1 to 1000 \(got 0\)$/);
  });

  it('reports every problem at once, each naming its field, joined into one message after the file name', () => {
    const parsed = parseDefinition(queue, '{"leaseSeconds":0,"maxAttempts":2000,"nope":1,"schema":{"type":"no-such-type"}}');
    if (!('error' in parsed)) throw new Error('expected problems');
    expect(parsed.problems).to.deep.equal([
      'unknown field "nope"',
      'leaseSeconds must be an integer from 1 to 86400 (got 0)',
      'maxAttempts must be an integer from 1 to 1000 (got 2000)',
      parsed.problems[3],
    ]);
    expect(parsed.problems[3]).to.match(/^schema does not compile/);
    expect(parsed.error).to.equal(`h.example.com/svc-queues/q.json: ${parsed.problems.join('; ')}`);
    // A oneOf that fails (timeoutSeconds, access lists) is one problem, not one per branch.
    expect((parseDefinition(queue, '{"timeoutSeconds":0,"access":{"post":["Bad"]}}') as { problems: string[] }).problems).to.have.length(2);
  });

  it('timeoutSeconds and retainSeconds: any integer up to 10^12 seconds; 1e400 (Infinity once parsed) or more is refused naming the field (decisions §2.2)', () => {
    expect(parseDefinition(queue, '{"timeoutSeconds":1000000000000,"retainSeconds":1000000000000}')).to.have.property('kind', 'queue');
    expect(parseDefinition(queue, '{"timeoutSeconds":2592000,"retainSeconds":0}')).to.have.property('kind', 'queue');
    expect(errorOf(queue, '{"timeoutSeconds":1e400}')).to.equal('h.example.com/svc-queues/q.json: timeoutSeconds must be an integer from 1 to 1000000000000, or null (got a number too large to read)');
    expect(errorOf(queue, '{"retainSeconds":1e400}')).to.match(/: retainSeconds must be an integer from 0 to 1000000000000 \(got /);
    expect(errorOf(queue, '{"timeoutSeconds":1e20}')).to.match(/: timeoutSeconds must be an integer from 1 to 1000000000000, or null \(got 100000000000000000000\)$/);
  });

  it('compiles item schemas independently: two queues may use the same $id (decisions §2.4)', () => {
    const body = '{"schema":{"$id":"https://example.com/item","type":"object"}}';
    expect(parseDefinition(queue, body)).to.have.property('kind', 'queue');
    expect(parseDefinition(at('h.example.com/svc-queues/other.json'), body)).to.have.property('kind', 'queue');
  });

  it('keeps nothing of an item schema whose validator is dropped: 2,000 definitions put one after another hold no memory once replaced (one shared ajv kept every validator it compiled, a few KB per PUT)', () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const put = (n: number): void => {
      const parsed = parseDefinition(queue, `{"schema":{"type":"object","required":["f${n}"],"properties":{"f${n}":{"type":"integer","minimum":${n}}}}}`);
      if (!('kind' in parsed) || parsed.kind !== 'queue') throw new Error('expected a queue');
      expect(parsed.validator!({ [`f${n}`]: n })).to.equal(true);
    };
    // The first compiles warm ajv and the code it generates up.
    for (let n = 0; n < 200; n++) put(n);
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let n = 200; n < 2200; n++) put(n);
    gc();
    expect(process.memoryUsage().heapUsed - before).to.be.below(2_000_000);
  });

  it('newUserToken makes a definition parseDefinition accepts for that user', () => {
    const made = newUserToken('alice');
    if ('error' in made) throw new Error(made.error);
    expect(made.tokenSha256).to.equal(sha256Hex(made.token));
    expect(parseDefinition(user, JSON.stringify(made.definition))).to.have.property('kind', 'user');
    expect(newUserToken('Alice')).to.have.property('error');
    expect(newUserToken('public')).to.have.property('error');
  });
});
