import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';
import { request } from '../support/http.js';
import { cleanupTemp, startServer, tempDir } from '../support/server.js';

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

describe('svcq token new (decisions §1.2, §2.3)', () => {
  it('prints a fresh 32-byte hex token and its sha256 without --user, and a different token each time', async () => {
    const [a, b] = await Promise.all([runCli(['token', 'new', '--json']), runCli(['token', 'new'])]);
    expect(a.code, a.stderr).to.equal(0);
    const json = JSON.parse(a.stdout) as { token: string; tokenSha256: string };
    expect(json.token).to.match(/^[0-9a-f]{64}$/);
    expect(json.tokenSha256).to.equal(sha256(json.token));
    const lines = b.stdout.trim().split('\n');
    expect(lines).to.have.length(2);
    const token = /^token:\s+([0-9a-f]{64})$/.exec(lines[0]!)?.[1];
    expect(token).to.be.a('string');
    expect(lines[1]).to.equal(`sha256: ${sha256(token!)}`);
    expect(token).to.not.equal(json.token);
  });

  it('refuses a --user name that breaks the name rule, or the reserved "public", with exit 2 and one sentence', async () => {
    const runs = await Promise.all([runCli(['token', 'new', '--user', 'Alice']), runCli(['token', 'new', '--user', 'public', '--json'])]);
    expect(runs[0]!.code).to.equal(2);
    expect(runs[0]!.stdout).to.equal('');
    expect(runs[0]!.stderr.trim()).to.equal('svcq: --user "Alice" is not a valid name (lowercase letters, digits, "_" and "-", starting with a letter or digit, at most 64 characters)');
    expect(runs[1]!.code).to.equal(2);
    expect(runs[1]!.stdout).to.equal('');
    expect(JSON.parse(runs[1]!.stderr)).to.deep.equal({ error: '--user "public" is reserved for requests made without a token' });
  });

  it('prints a user definition the server accepts, whose token then posts to a queue that lists the user (decisions §2.3)', async () => {
    const server = await startServer();
    const dir = tempDir('svcq-defs-');
    try {
      const made = await runCli(['token', 'new', '--user', 'alice']);
      expect(made.code, made.stderr).to.equal(0);
      const [tokenLine, definitionLine] = made.stdout.trim().split('\n') as [string, string];
      const token = tokenLine.replace(/^token:\s+/, '');
      expect(JSON.parse(definitionLine)).to.deep.equal({ 'svc-user-name': 'alice', tokenSha256: sha256(token) });

      const host = 'tokens.example.com';
      mkdirSync(path.join(dir, host, 'svc-users'), { recursive: true });
      mkdirSync(path.join(dir, host, 'svc-queues'), { recursive: true });
      writeFileSync(path.join(dir, host, 'svc-users', 'alice.json'), `${definitionLine}\n`);
      writeFileSync(path.join(dir, host, 'svc-queues', 'inbox.json'), JSON.stringify({ access: { post: ['alice'], fetch: ['alice'] } }));
      const synced = await runCli(['sync', dir, '--url', server.url, '--token', server.masterToken]);
      expect(synced.code, synced.stderr).to.equal(0);
      expect(synced.stdout).to.include('2 put, 0 deleted, 0 unchanged');

      const posted = await request(server.url, '/inbox', { method: 'POST', host, token, body: '{"n":1}' });
      expect(posted.status, posted.text).to.equal(200);
      const { id } = posted.json as { id: string };
      const fetched = await request(server.url, `/inbox/items/${id}`, { host, token });
      expect((fetched.json as { postedBy: string }).postedBy).to.equal('alice');

      const other = await request(server.url, '/inbox', { method: 'POST', host, token: `${token}0`, body: '{"n":1}' });
      expect(other.status).to.equal(404);
    } finally {
      await server.stop();
      cleanupTemp(server.root);
      cleanupTemp(dir);
    }
  });
});
