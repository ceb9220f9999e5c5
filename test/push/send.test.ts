import { expect } from 'chai';
import { retryAfter, send } from '../../src/push/send.js';
import { sign, verify } from '../../src/push/sign.js';
import { PushTarget } from '../support/push-target.js';

describe('one outbound POST and its signature (decisions §9.1)', () => {
  let target: PushTarget;
  before(async () => {
    target = await PushTarget.start();
  });
  after(async () => {
    await target.stop();
  });

  it('signs "<timestamp>.<body>" with HMAC-SHA256 as v1=<hex>, and the signature checks', () => {
    const headers = sign('a-secret-of-16-chars', '{"a":1}', 1_700_000_000_500);
    expect(headers['svcq-timestamp']).to.equal('1700000000');
    // echo -n '1700000000.{"a":1}' | openssl dgst -sha256 -hmac a-secret-of-16-chars
    expect(headers['svcq-signature']).to.match(/^v1=[0-9a-f]{64}$/);
    expect(verify('a-secret-of-16-chars', '{"a":1}', headers['svcq-timestamp'], headers['svcq-signature'])).to.equal(true);
    expect(verify('a-secret-of-16-chars', '{"a":2}', headers['svcq-timestamp'], headers['svcq-signature'])).to.equal(false);
    expect(verify('another-secret-16chars', '{"a":1}', headers['svcq-timestamp'], headers['svcq-signature'])).to.equal(false);
  });

  it('answers a 2xx with its body and no reason, the request carrying the body and headers given', async () => {
    const sent = await send(`${target.url}/ok`, '{"n":1}', { 'content-type': 'application/json', 'x-extra': 'yes' }, { timeoutMs: 2000 });
    expect(sent).to.include({ status: 200, reason: null, body: '{"got":{"n":1}}', truncated: false, retryAfterSeconds: null });
    const last = target.received.at(-1);
    expect(last?.headers['x-extra']).to.equal('yes');
    expect(last?.body).to.equal('{"n":1}');
  });

  it('answers a 500 with a sentence and the body', async () => {
    const sent = await send(`${target.url}/fail`, '{}', {}, { timeoutMs: 2000 });
    expect(sent).to.include({ status: 500, reason: 'the target answered 500', body: 'it broke' });
  });

  it('reads Retry-After in seconds or as an HTTP date', async () => {
    const sent = await send(`${target.url}/busy?after=7`, '{}', {}, { timeoutMs: 2000 });
    expect(sent).to.include({ status: 429, retryAfterSeconds: 7 });
    expect(retryAfter(new Date(10_000).toUTCString(), 0)).to.equal(10);
    expect(retryAfter('soon', 0)).to.equal(null);
  });

  it('follows no redirect: a 3xx is an answer naming where it pointed', async () => {
    const sent = await send(`${target.url}/redirect?to=http://169.254.169.254/`, '{}', {}, { timeoutMs: 2000 });
    expect(sent.status).to.equal(302);
    expect(sent.reason).to.equal('the target answered 302, a redirect to http://169.254.169.254/, which is not followed');
  });

  it('answers a reset or refused connection and a silent target with status null and a reason, within the timeout', async () => {
    const reset = await send(`${target.url}/reset`, '{}', {}, { timeoutMs: 2000 });
    expect(reset).to.include({ status: null, reason: 'the connection was closed before an answer' });
    const hang = await send(`${target.url}/hang`, '{}', {}, { timeoutMs: 300 });
    expect(hang).to.include({ status: null, reason: 'no answer within 0.3 s' });
    expect(hang.ms).to.be.within(250, 1500);
    const refused = await send('http://127.0.0.1:1/', '{}', {}, { timeoutMs: 2000 });
    expect(refused).to.include({ status: null, reason: 'the connection was refused' });
  });

  it('keeps at most maxBytes of a long answer', async () => {
    target.custom = (_, res) => res.end('x'.repeat(100_000));
    const sent = await send(`${target.url}/custom`, '{}', {}, { timeoutMs: 2000 });
    expect(sent.body.length).to.equal(4096);
    expect(sent.truncated).to.equal(true);
  });
});
