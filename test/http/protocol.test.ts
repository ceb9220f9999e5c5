import { expect } from 'chai';
import net from 'node:net';
import { request } from '../support/http.js';
import { serverForSuite } from '../support/server.js';
import { defineQueue, defineUser, PUBLIC_ACCESS } from './queue-api.js';

const HOST = 'wire.example.com';

interface Exchange {
  /** Everything the server sent, as latin1 text. */
  text: string;
  /** Whether the server closed the connection within the wait. */
  closed: boolean;
  /** Bytes this client managed to write (the server reads what it is sent, or stops reading). */
  written: number;
}

/**
 * Sends `head` on a raw connection, then (with `stream`) keeps writing body bytes for as long as
 * the server reads them, and gathers what the server sends until it closes or `waitMs` passes.
 */
function exchange(port: number, head: string | Buffer, options: { waitMs?: number; stream?: boolean; abortAfterMs?: number; untilClosed?: boolean } = {}): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let written = 0;
    let closed = false;
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), closed, written });
    };
    const timer = setTimeout(finish, options.waitMs ?? 2000);
    socket.on('data', (c: Buffer) => {
      chunks.push(c);
      // A whole answer with a length, and nothing more to send: no need to wait for the rest of the time.
      if (options.stream || options.untilClosed || options.abortAfterMs !== undefined) return;
      const { head, body } = lastResponse(Buffer.concat(chunks).toString('latin1'));
      const length = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1];
      if (length !== undefined && Buffer.byteLength(body, 'latin1') >= Number(length)) finish();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.on('connect', () => {
      socket.write(head);
      if (options.abortAfterMs !== undefined) setTimeout(() => socket.destroy(), options.abortAfterMs);
      if (!options.stream) return;
      const block = Buffer.alloc(64 * 1024, 0x20);
      const pump = (): void => {
        while (!done && !socket.destroyed) {
          written += block.length;
          if (!socket.write(block)) return void socket.once('drain', pump);
        }
      };
      pump();
    });
  });
}

function statusOf(text: string): number {
  return Number(text.slice(9, 12));
}

/** The header block and body of the response in `text`, past any `100 Continue`. */
function lastResponse(text: string): { head: string; body: string } {
  let rest = text;
  while (rest.startsWith('HTTP/1.1 100 ')) rest = rest.slice(rest.indexOf('\r\n\r\n') + 4);
  const end = rest.indexOf('\r\n\r\n');
  return { head: rest.slice(0, end), body: rest.slice(end + 4) };
}

describe('HTTP framing and clients that misbehave (decisions §1.1, §3.5, §4)', function () {
  this.timeout(30_000);
  const server = serverForSuite();
  const port = (): number => Number(new URL(server.url).port);
  const userToken = 'wire-user-token-0123456789abcdef';

  before(async () => {
    await defineQueue(server, HOST, 'open', { access: PUBLIC_ACCESS });
    await defineUser(server, HOST, 'alice', userToken);
    await defineQueue(server, HOST, 'closed', { access: { post: ['alice'], work: ['alice'], fetch: ['alice'] } });
  });

  it('a body declared past the limit gets its 413 and the connection is closed, not read to its end (decisions §3.5)', async () => {
    const got = await exchange(port(), `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n`, { stream: true, waitMs: 5000 });
    expect(statusOf(got.text), got.text).to.equal(413);
    expect(got.text.toLowerCase()).to.include('connection: close');
    expect(got.closed, 'the server closed the connection').to.equal(true);
    // Before, the server read (and dropped) gigabytes a second for as long as the client sent them.
    expect(got.written).to.be.below(64 * 1024 * 1024);
  });

  it('a client that sent connection: close and is still sending a body the wall left unread is not reset under its answer: the rest is read and dropped a while first (decisions §4, lingering close)', async () => {
    for (const [what, head] of [
      ['connection: close', `POST /zz HTTP/1.1\r\nHost: nope.example.com\r\nConnection: close\r\nContent-Length: 1000000000000\r\n\r\n`],
      ['HTTP/1.0', `POST /zz HTTP/1.0\r\nHost: nope.example.com\r\nContent-Length: 1000000000000\r\n\r\n`],
    ]) {
      // How long after the answer came the server stopped taking the body (a reset: EPIPE or ECONNRESET while writing).
      const { text, resetAfterMs } = await new Promise<{ text: string; resetAfterMs: number }>((resolve) => {
        const socket = net.connect(port(), '127.0.0.1');
        let text = '';
        let answeredAt = 0;
        const finish = (): void => {
          clearTimeout(timer);
          socket.destroy();
          resolve({ text, resetAfterMs: answeredAt === 0 ? -1 : Date.now() - answeredAt });
        };
        const timer = setTimeout(finish, 2500);
        socket.on('data', (c: Buffer) => {
          text += c.toString('latin1');
          if (answeredAt === 0) answeredAt = Date.now();
        });
        socket.on('error', finish);
        socket.on('connect', () => {
          socket.write(head);
          const block = Buffer.alloc(64 * 1024, 0x20);
          const pump = (): void => {
            while (!socket.destroyed) if (!socket.write(block)) return void socket.once('drain', pump);
          };
          pump();
        });
      });
      expect(statusOf(text), what).to.equal(404);
      // The server lingers 2 s; a close at once resets within milliseconds of the answer.
      expect(resetAfterMs, what).to.be.at.least(1000);
    }
  });

  it('a body of 64 KiB or less still on its way on a connection that ends (connection: close) is read and dropped after the wall, not reset under it (decisions §4, lingering close)', async () => {
    const size = 60_000;
    const outcome = await new Promise<{ text: string; error?: string }>((resolve) => {
      // Half-open allowed: the client goes on sending after the server's end, as an HTTP client does until it has sent its request.
      const socket = net.connect({ port: port(), host: '127.0.0.1', allowHalfOpen: true });
      let text = '';
      let done = false;
      const finish = (error?: string): void => {
        if (done) return;
        done = true;
        socket.destroy();
        resolve({ text, error });
      };
      socket.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message));
      socket.on('data', (c: Buffer) => {
        const first = text === '';
        text += c.toString('latin1');
        if (!first) return;
        // The answer came with most of the body unsent: the rest follows, as a slow client sends it.
        const pieces = [20_000, 20_000, size - 41_000];
        const send = (): void => {
          if (done) return;
          const piece = pieces.shift();
          if (piece === undefined) return void setTimeout(() => finish(), 300);
          socket.write(Buffer.alloc(piece, 0x20));
          setTimeout(send, 100);
        };
        setTimeout(send, 300);
      });
      socket.on('connect', () => socket.write(`POST /zz HTTP/1.1\r\nHost: nope.example.com\r\nConnection: close\r\nContent-Length: ${size}\r\n\r\n${' '.repeat(1000)}`));
    });
    expect(statusOf(outcome.text)).to.equal(404);
    // Closed at once, the server resets the connection under the rest of the body (EPIPE or ECONNRESET).
    expect(outcome.error, 'the connection was reset while the client still sent its body').to.equal(undefined);
  });

  it('the wall before a body of 64 KiB or less keeps the connection: the body is read and dropped, and the next request on it is served (decisions §4; docs/behaviour.md: a smaller body is read and dropped)', async () => {
    const body = `{"pad":"${' '.repeat(60 * 1024)}"}`;
    const walled = `POST /zz HTTP/1.1\r\nHost: nope.example.com\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const served = `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
    const got = await exchange(port(), walled + served, { untilClosed: true, waitMs: 1500 });
    const answers = got.text.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers.map(statusOf), got.text.slice(0, 400)).to.deep.equal([404, 200]);
    expect(answers[0]!.toLowerCase()).to.not.include('connection: close');
  });

  it('a body that grows past the limit without declaring its size (chunked) gets the same (decisions §3.5)', async () => {
    const chunk = `${(64 * 1024).toString(16)}\r\n${' '.repeat(64 * 1024)}\r\n`;
    const got = await exchange(port(), `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunk.repeat(20)}`, { waitMs: 5000, untilClosed: true });
    expect(statusOf(got.text), got.text.slice(0, 300)).to.equal(413);
    expect(got.closed).to.equal(true);
  });

  it('the wall for a request with a body closes the connection alike for an unknown host and a queue the caller may not use (decisions §4)', async () => {
    const probe = (host: string, path: string): Promise<Exchange> =>
      exchange(port(), `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n`, { stream: true, waitMs: 5000 });
    const unknown = await probe('nope.example.com', '/zz');
    const denied = await probe(HOST, '/closed');
    for (const got of [unknown, denied]) {
      expect(statusOf(got.text)).to.equal(404);
      expect(got.closed).to.equal(true);
      expect(got.written).to.be.below(64 * 1024 * 1024);
    }
    const mask = (t: string): string => lastResponse(t).head.replace(/^date: .*$/im, 'date: -');
    expect(mask(denied.text)).to.equal(mask(unknown.text));
    // A small body: the same again, byte for byte.
    const small = async (host: string, path: string): Promise<string> => mask((await exchange(port(), `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 7\r\n\r\n{"a":1}`)).text);
    expect(await small(HOST, '/closed')).to.equal(await small('nope.example.com', '/zz'));
  });

  it('CONNECT, a method no table lists, gets the wall and then the connection ends, rather than a connection cut without an answer (interface §5.3, decisions §4)', async () => {
    const mask = (t: string): string => t.replace(/\r\ndate: [^\r]*/i, '\r\ndate: -');
    // The wall of a connection's last answer, to compare with byte for byte.
    const wall = await exchange(port(), `GET /zz HTTP/1.1\r\nHost: nope.example.com\r\nConnection: close\r\n\r\n`, { untilClosed: true });
    expect(statusOf(wall.text)).to.equal(404);
    for (const head of [
      `CONNECT ${HOST}:443 HTTP/1.1\r\nHost: ${HOST}:443\r\n\r\n`,
      `CONNECT /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      `CONNECT /api/v2/manifest HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${server.masterToken}\r\n\r\n`,
    ]) {
      const got = await exchange(port(), head, { untilClosed: true });
      expect(got.closed, head).to.equal(true);
      expect(mask(got.text), head).to.equal(mask(wall.text));
    }
  });

  it('a method Node\'s parser does not know (FOO, get: methods are case-sensitive) gets the wall, not a 400 that calls the request something other than HTTP; bytes that are no method still get the 400 (decisions §4)', async () => {
    const mask = (t: string): string => t.replace(/\r\ndate: [^\r]*/i, '\r\ndate: -');
    const wall = await exchange(port(), `GET /zz HTTP/1.1\r\nHost: nope.example.com\r\nConnection: close\r\n\r\n`, { untilClosed: true });
    for (const head of [
      `FOO /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      `get /open/items/0123456789abcdef HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      // The beginning of a method Node knows (GET), and no more.
      `GE /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`,
      `FOO /api/v2/manifest HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${server.masterToken}\r\n\r\n`,
    ]) {
      const got = await exchange(port(), head, { untilClosed: true });
      expect(got.closed, head).to.equal(true);
      expect(mask(got.text), head).to.equal(mask(wall.text));
    }
    for (const head of ['\u0000\u0001 /open HTTP/1.1\r\n\r\n', `F(O /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`]) {
      const got = await exchange(port(), head, { untilClosed: true });
      expect(statusOf(got.text), JSON.stringify(head)).to.equal(400);
    }
  });

  it('a request Node refuses or hands over bare (CONNECT), pipelined behind one still being answered, is answered after it: the earlier answer is neither lost nor preceded (RFC 9112 §9.3.2)', async () => {
    const claim = '{"wait":1,"criteria":{"nothing":"matches"}}';
    const first = `POST /open/claim HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: ${claim.length}\r\n\r\n${claim}`;
    for (const [broken, status] of [
      [`FOO /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, 404],
      [`POST /open HTTP/1.1\r\nHost: ${HOST}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n`, 400],
      [`CONNECT /open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, 404],
    ] as const) {
      const got = await exchange(port(), first + broken, { untilClosed: true, waitMs: 5000 });
      expect(statusOf(got.text), got.text).to.equal(200);
      const second = got.text.indexOf('HTTP/1.1 ', 1);
      expect(got.text.slice(0, second === -1 ? undefined : second), got.text).to.match(/\r\n\r\n\{"ok":true,"empty":true\}$/);
      expect(second, got.text).to.be.above(0);
      expect(statusOf(got.text.slice(second)), got.text).to.equal(status);
      expect(got.closed).to.equal(true);
    }
    // And the server is still there.
    expect((await request(server.url, '/open/claim', { method: 'POST', host: HOST, body: '{}' })).status).to.equal(200);
  });

  it('a request sent behind an answer that ends the connection is not served, in the same packet or later (RFC 9112 §9.6)', async () => {
    const big = `{"pad":"${'x'.repeat(70_000)}"}`;
    const first = `POST /closed HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: ${big.length}\r\n\r\n${big}`;
    const second = (tag: string): string => `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: ${`{"pipe":"${tag}"}`.length}\r\n\r\n{"pipe":"${tag}"}`;
    const together = await exchange(port(), first + second('together'), { untilClosed: true, waitMs: 5000 });
    expect(statusOf(together.text)).to.equal(404);
    expect(together.text.match(/HTTP\/1\.1 /g), 'one answer').to.have.length(1);
    const later = await new Promise<string>((resolve) => {
      const socket = net.connect({ port: port(), host: '127.0.0.1', allowHalfOpen: true });
      let text = '';
      socket.on('data', (c: Buffer) => (text += c.toString('latin1')));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve(text));
      socket.write(first);
      setTimeout(() => socket.write(second('later'), () => undefined), 300);
      setTimeout(() => socket.destroy(), 3000);
    });
    expect(statusOf(later)).to.equal(404);
    expect(later.match(/HTTP\/1\.1 /g), 'one answer').to.have.length(1);
    // Neither item was made.
    for (;;) {
      const claim = await request(server.url, '/open/claim', { method: 'POST', host: HOST, body: '{}' });
      expect(claim.text).not.to.include('"pipe"');
      if (claim.text.includes('"empty":true')) break;
    }
  });

  it('a preflight that comes with a large body ends its connection rather than reading the body (decisions §4)', async () => {
    const got = await exchange(port(), `OPTIONS /zz HTTP/1.1\r\nHost: nope.example.com\r\nContent-Length: 1000000000000\r\n\r\n`, { stream: true, waitMs: 5000 });
    expect(statusOf(got.text)).to.equal(204);
    expect(got.closed).to.equal(true);
    expect(got.written).to.be.below(64 * 1024 * 1024);
  });

  it('expect: 100-continue is answered 100 only where the body is wanted (RFC 9110 §10.1.1)', async () => {
    const ask = (host: string, path: string, length: number): Promise<Exchange> =>
      exchange(port(), `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`, { waitMs: 1000 });
    const tooLarge = await ask(HOST, '/open', 5_000_000);
    expect(tooLarge.text.startsWith('HTTP/1.1 413'), tooLarge.text).to.equal(true);
    const walled = await ask('nope.example.com', '/zz', 7);
    expect(walled.text.startsWith('HTTP/1.1 404'), walled.text).to.equal(true);
    // A post that will be read: 100, then the body, then its answer.
    const ok = await new Promise<string>((resolve) => {
      const socket = net.connect(port(), '127.0.0.1');
      let text = '';
      socket.on('data', (c: Buffer) => {
        text += c.toString('latin1');
        if (text.startsWith('HTTP/1.1 100') && !text.includes('HTTP/1.1 200') && text.endsWith('\r\n\r\n')) socket.write('{"a":1}');
        if (text.includes('HTTP/1.1 200') && text.endsWith('}')) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.write(`POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n`);
    });
    expect(ok).to.match(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200/);
    // Under /api: 100 only past the master token, in either form of the target.
    const put = (target: string, token: string): Promise<Exchange> =>
      exchange(port(), `PUT ${target} HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${token}\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n`, { waitMs: 1000 });
    const path = `/api/v2/def?path=${HOST}/svc-queues/continued.json`;
    expect((await put(path, server.masterToken)).text).to.match(/^HTTP\/1\.1 100 Continue\r\n/);
    expect((await put(`http://${HOST}${path}`, server.masterToken)).text).to.match(/^HTTP\/1\.1 100 Continue\r\n/);
    expect((await put(path, 'not-the-master-token')).text).to.match(/^HTTP\/1\.1 404 /);
  });

  it('a body that is not UTF-8 is refused with 400 naming the problem, and UTF-8 text is kept as sent (interface §2.1, decisions §3.5)', async () => {
    const bad = Buffer.concat([Buffer.from('{"s":"'), Buffer.from([0xe9, 0xff]), Buffer.from('"}')]);
    const surrogate = Buffer.concat([Buffer.from('{"s":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]);
    for (const body of [bad, surrogate]) {
      const reply = await request(server.url, '/open', { method: 'POST', host: HOST, body });
      expect(reply.status, reply.text).to.equal(400);
      expect(reply.json).to.deep.equal({ ok: false, errors: [{ path: '', message: 'the request body is not UTF-8 text' }] });
    }
    const text = '{"s":"é𝄞ü"}';
    const posted = await request(server.url, '/open', { method: 'POST', host: HOST, body: text });
    expect(posted.status).to.equal(200);
    const claim = await request(server.url, '/open/claim', { method: 'POST', host: HOST, body: '{}' });
    // Earlier posts of this suite may come first: claim until this one.
    let claimed = claim.text;
    while (!claimed.includes((posted.json as { id: string }).id) && !claimed.includes('"empty":true')) claimed = (await request(server.url, '/open/claim', { method: 'POST', host: HOST, body: '{}' })).text;
    expect(claimed).to.include(`"item":${text}`);
  });

  it('a client that goes away halfway through its body is no internal error, and its access line keeps its address (decisions §5)', async () => {
    await exchange(port(), `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":`, { abortAfterMs: 100, waitMs: 1000 });
    await new Promise((r) => setTimeout(r, 300));
    expect(server.output()).not.to.include('internal error');
    const deadline = Date.now() + 5000;
    let line: { status: number; ip: string; path: string } | undefined;
    while (line === undefined && Date.now() < deadline) {
      const logs = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken });
      line = logs.text
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { status: number; ip: string; path: string })
        .find((l) => l.status === 499 && l.path === '/open');
      if (line === undefined) await new Promise((r) => setTimeout(r, 100));
    }
    expect(line, 'a 499 line for the request').not.to.equal(undefined);
    expect(line!.ip).to.equal('127.0.0.1');
  });

  it('what Node refuses by itself is answered in JSON: bad framing 400, headers past 16 KiB 431, an unmet expectation 417 (interface §7)', async () => {
    const cases: Array<[string, number, RegExp]> = [
      [`POST /open HTTP/1.1\r\nHost: ${HOST}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n`, 400, /not valid HTTP\/1\.1/],
      [`POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`, 400, /not valid HTTP\/1\.1/],
      [`GET /open HTTP/1.1\r\nHost: ${HOST}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, /larger than 16 KiB/],
      [`POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2\r\nExpect: 200-ok\r\n\r\n{}`, 417, /100-continue/],
    ];
    for (const [bytes, status, message] of cases) {
      const got = await exchange(port(), bytes);
      const { head, body } = lastResponse(got.text);
      expect(statusOf(head), got.text).to.equal(status);
      expect(head.toLowerCase()).to.include('content-type: application/json; charset=utf-8');
      expect(head.toLowerCase()).to.include('access-control-allow-origin: *');
      expect((JSON.parse(body) as { error: string }).error).to.match(message);
    }
  });

  it('an HTTP/1.1 request needs exactly one Host: none or two is a 400 in JSON (RFC 9112 §3.2)', async () => {
    const none = await exchange(port(), 'POST /open HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}');
    expect(statusOf(none.text)).to.equal(400);
    expect(JSON.parse(lastResponse(none.text).body)).to.deep.equal({ error: 'the request has no Host header' });
    const two = await exchange(port(), `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nHost: nope.example.com\r\nContent-Length: 2\r\n\r\n{}`);
    expect(statusOf(two.text)).to.equal(400);
    expect(JSON.parse(lastResponse(two.text).body)).to.deep.equal({ error: 'the request has more than one Host header' });
    // HTTP/1.0 has no Host requirement: the wall, as for any unknown host.
    const old = await exchange(port(), 'GET /open HTTP/1.0\r\n\r\n');
    expect(statusOf(old.text)).to.equal(404);
  });

  it('the 400 for a missing or doubled Host ends the connection: a request behind it on the same connection is not served (RFC 9112 §3.2)', async () => {
    const behind = `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2\r\n\r\n{}`;
    for (const [what, first] of [
      ['no Host', 'POST /open HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}'],
      ['two Hosts', `POST /open HTTP/1.1\r\nHost: ${HOST}\r\nHost: nope.example.com\r\nContent-Length: 2\r\n\r\n{}`],
    ]) {
      const got = await exchange(port(), first + behind, { untilClosed: true, waitMs: 3000 });
      expect(statusOf(got.text), what).to.equal(400);
      expect(got.text.toLowerCase(), what).to.include('connection: close');
      expect(got.closed, what).to.equal(true);
      expect(got.text.split('HTTP/1.1 ').length - 1, `${what}: answers`).to.equal(1);
    }
  });

  it('an absolute-form target with userinfo gets the wall under /api too, master token and all, and its credentials are never logged (decisions §4, §5)', async () => {
    const got = await exchange(port(), `GET http://someone:s3cr3t-userinfo@${HOST}/api/version HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${server.masterToken}\r\n\r\n`);
    expect(statusOf(got.text), got.text).to.equal(404);
    expect(lastResponse(got.text).body).to.equal('{"error":"not found"}');
    const log = await request(server.url, '/api/v2/logs/file?which=active', { token: server.masterToken });
    expect(log.text).to.not.include('s3cr3t-userinfo');
  });

  it('long absolute-form targets with a fragment or userinfo get the wall at once: twenty with a fragment took 4 s of the event loop when one regular expression cut them (decisions §4)', async () => {
    const long = 'a'.repeat(16_000);
    const started = performance.now();
    for (let n = 0; n < 20; n++) {
      const fragment = await exchange(port(), `GET http://${long}/b#x HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      expect(statusOf(fragment.text), fragment.text.slice(0, 200)).to.equal(404);
      const userinfo = await exchange(port(), `GET http://${long}@${HOST}/open HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`);
      expect(statusOf(userinfo.text), userinfo.text.slice(0, 200)).to.equal(404);
    }
    // Linear cutting answers these in milliseconds; the bound is far above any scheduling noise.
    const ms = performance.now() - started;
    expect(ms, `${ms.toFixed(0)} ms`).to.be.below(1_500);
  });

  it('an absolute-form target is routed by its own authority, and a Host written with its trailing dot is the same host (RFC 9112 §3.2.2, decisions §2.1)', async () => {
    const absolute = await exchange(port(), `POST http://${HOST}/open HTTP/1.1\r\nHost: nope.example.com\r\nContent-Length: 2\r\n\r\n{}`);
    expect(statusOf(absolute.text), absolute.text).to.equal(200);
    const otherAuthority = await exchange(port(), `POST http://nope.example.com/open HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 2\r\n\r\n{}`);
    expect(statusOf(otherAuthority.text)).to.equal(404);
    const api = await exchange(port(), `GET http://${HOST}/api/version HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: Bearer ${server.masterToken}\r\n\r\n`);
    expect(statusOf(api.text), api.text).to.equal(200);
    const dotted = await request(server.url, '/open', { method: 'POST', host: `${HOST}.`, body: '{}' });
    expect(dotted.status).to.equal(200);
  });
});
