import { Writable } from 'node:stream';
import { expect } from 'chai';
import { ConsoleSink, RETRY_REPORT_EVERY_MS } from '../../src/worker/console-sink.js';

/** A stream that keeps what is written to it; `tty` makes it look like a terminal. */
class Capture extends Writable {
  text = '';
  readonly isTTY: boolean;
  readonly columns = 120;
  constructor(tty: boolean) {
    super();
    this.isTTY = tty;
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.text += chunk.toString();
    done();
  }
}

describe('ConsoleSink', () => {
  describe('a server that cannot be reached', () => {
    it('is reported on stderr at the first failure, then at most every 10 s, and its return once', () => {
      let now = 1_000_000;
      const stdout = new Capture(false);
      const stderr = new Capture(false);
      const sink = new ConsoleSink({ json: stdout, statusLine: false, stderr, queue: 'q', now: () => now });
      const message = 'cannot reach http://127.0.0.1:1 (connection refused)';
      const start = now;
      for (let t = 0; t <= 25_000; t += 1000) {
        now = start + t;
        sink.event({ event: 'retry', what: 'claim', attempt: 1, delayMs: 1000, message });
      }
      sink.event({ event: 'reconnected', afterMs: 25_000 });
      now += 1000;
      sink.event({ event: 'retry', what: 'result', id: 'abc', attempt: 1, delayMs: 100, message: 'the store is unavailable' });
      sink.close();
      expect(RETRY_REPORT_EVERY_MS).to.equal(10_000);
      expect(stderr.text.split('\n')).to.deep.equal([
        `${message}; retrying`,
        `${message}; still retrying after 10 s`,
        `${message}; still retrying after 20 s`,
        'the server answers again, after 25 s of failures',
        // A new run of failures is reported at once again.
        'result for abc failed: the store is unavailable; retrying',
        '',
      ]);
      // Programs still get every retry.
      expect(stdout.text.split('\n').filter((l) => l.includes('"event":"retry"'))).to.have.length(27);
    });
  });
});
