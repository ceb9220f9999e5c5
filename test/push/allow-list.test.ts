import { expect } from 'chai';
import { PushAllowList } from '../../src/push/allow-list.js';
import { postOptions } from '../../src/engine/rules.js';
import { parseDefinition } from '../../src/definitions/schemas.js';
import { resolveQueue } from '../../src/engine/config.js';
import type { QueueDefinition } from '../../src/definitions/schemas.js';

const at = { host: 'h.test', kind: 'queue' as const, name: 'q', path: 'h.test/svc-queues/q.json' };

describe('the push allow-list (decisions §9)', () => {
  it('allows no URL when the server was started without --push-allow', () => {
    const none = PushAllowList.parse(undefined);
    expect(none.allows('http://127.0.0.1:9000/')).to.equal(false);
    expect(none.refusal('http://x.test/')).to.match(/without --push-allow/);
  });

  it('allows a URL that starts with a prefix, compared in normalised form (scheme and host case, default port, empty path)', () => {
    const list = PushAllowList.parse(['HTTPS://Hooks.Example.com:443', 'http://127.0.0.1:9000/api/']);
    expect(list.allows('https://hooks.example.com/x')).to.equal(true);
    expect(list.allows('https://HOOKS.example.com/')).to.equal(true);
    expect(list.allows('http://127.0.0.1:9000/api/jobs?x=1')).to.equal(true);
    expect(list.allows('http://127.0.0.1:9000/other')).to.equal(false);
    expect(list.allows('http://hooks.example.com/x')).to.equal(false);
  });

  it('never allows another host hidden behind a prefix that lacks its slash, nor a URL with user info', () => {
    const list = PushAllowList.parse(['https://hooks.example.com']);
    expect(list.allows('https://hooks.example.com.evil.test/')).to.equal(false);
    expect(list.allows('https://hooks.example.com@evil.test/')).to.equal(false);
    expect(list.allows('https://user:pw@hooks.example.com/')).to.equal(false);
  });

  it('takes several prefixes in one value, comma-separated (SVCQ_PUSH_ALLOW), and refuses one that is not an http(s) URL', () => {
    const list = PushAllowList.parse(['http://a.test/, http://b.test/']);
    expect(list.prefixes).to.deep.equal(['http://a.test/', 'http://b.test/']);
    expect(() => PushAllowList.parse(['ftp://a.test/'])).to.throw(/--push-allow "ftp:\/\/a.test\/" is not an absolute http/);
  });

  it('a post names its callback by ?callback, an absolute http(s) URL, once (decisions §9.2)', () => {
    expect(postOptions({ callback: 'https://cb.test/done' }).options.callback).to.equal('https://cb.test/done');
    expect(postOptions({ callback: 'not a url' }).errors).to.deep.equal([{ path: '?callback', message: 'callback must be an absolute http:// or https:// URL' }]);
    expect(postOptions({ callback: ['http://a.test/', 'http://b.test/'] }).errors[0]!.path).to.equal('?callback');
  });

  it('a queue definition names push.url and callback as URLs, and sets no header the server sets itself (decisions §9.1)', () => {
    const bad = parseDefinition(at, JSON.stringify({ push: { url: 'file:///etc/passwd', headers: { 'svcq-attempt': '1', 'bad name': 'x' } }, callback: 'x' }));
    expect(bad).to.have.property('error');
    const problems = (bad as { problems: string[] }).problems;
    expect(problems).to.include('callback must be an absolute http:// or https:// URL (got "x")');
    expect(problems).to.include('push.url must be an absolute http:// or https:// URL (got "file:///etc/passwd")');
    expect(problems).to.include('push.headers may not set "svcq-attempt": the server sets it');
    expect(problems).to.include('push.headers has "bad name", which is not an HTTP header name');
  });

  it('a push queue defaults to 30 s, 10 per node, and leases at least its timeout plus 5 s (decisions §9.1)', () => {
    const config = resolveQueue({ push: { url: 'http://t.test/' } } satisfies QueueDefinition);
    expect(config.push).to.deep.equal({ url: 'http://t.test/', timeoutMs: 30_000, concurrency: 10, headers: {}, secret: null });
    expect(config.leaseMs).to.equal(60_000);
    expect(resolveQueue({ leaseSeconds: 10, push: { url: 'http://t.test/', timeoutSeconds: 120 } }).leaseMs).to.equal(125_000);
    expect(resolveQueue({ leaseSeconds: 10 }).leaseMs).to.equal(10_000);
  });
});
