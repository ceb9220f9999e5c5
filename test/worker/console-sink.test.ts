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

/**
 * What a terminal shows for `text`: finished lines, and the line the cursor is on. Knows the only
 * controls the sink writes: `\r\x1b[K` (clear the line) and `\n`.
 */
function screen(text: string): { lines: string[]; current: string } {
  const lines: string[] = [];
  let current = '';
  for (const [i, afterClear] of text.split('\r\x1b[K').entries()) {
    if (i > 0) current = '';
    const parts = afterClear.split('\n');
    current += parts[0];
    for (const part of parts.slice(1)) {
      lines.push(current);
      current = part;
    }
  }
  return { lines, current };
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('ConsoleSink', () => {
  describe('the status line on a terminal', () => {
    let tty: Capture;
    let sink: ConsoleSink;
    beforeEach(async () => {
      tty = new Capture(true);
      sink = new ConsoleSink({ json: null, statusLine: true, stderr: tty, queue: 'q' });
      sink.event({ event: 'started', queue: 'q', worker: 'w', concurrency: 2 });
      sink.running(['aaa', 'bbb']);
      sink.event({ event: 'claimed', id: 'aaa', attempts: 1 });
      sink.event({ event: 'claimed', id: 'bbb', attempts: 1 });
      await pause(150);
      expect(screen(tty.text).current).to.match(/^q: running 2 · done 0 · failed 0 · /);
    });
    afterEach(() => sink.close());

    it('stays drawn: a line CMD writes to stderr is printed above it, and it is drawn again at once below', () => {
      sink.stderrLine('aaa', 'working hard');
      const shown = screen(tty.text);
      expect(shown.lines.at(-1)).to.equal('[aaa] working hard');
      expect(shown.current).to.match(/^q: running 2 · done 0 · failed 0 · .* · aaa bbb$/);
    });

    it('counts a cancelled item as cancelled, not as failed', async () => {
      sink.event({ event: 'finished', id: 'aaa', attempts: 1, ms: 10, accepted: true, status: 'finished' });
      sink.event({ event: 'cancelled', id: 'bbb', status: 'cancelled' });
      sink.running([]);
      await pause(150);
      const shown = screen(tty.text);
      expect(shown.lines.at(-1)).to.equal('bbb is cancelled: its command was stopped');
      expect(shown.current).to.match(/^q: running 0 · done 1 · failed 0 · cancelled 1 · /);
    });

    it('is not drawn again after the final "stopped: N done, M failed, K cancelled" line', async () => {
      sink.running([]);
      sink.event({ event: 'stopping', running: 0, force: false });
      sink.event({ event: 'stopped', done: 1, failed: 0, cancelled: 1 });
      sink.close();
      const final = tty.text;
      const shown = screen(final);
      expect(shown.lines.at(-1)).to.equal('stopped: 1 done, 0 failed, 1 cancelled');
      expect(shown.current, 'nothing after the final line').to.equal('');
      // No redraw is still on its way.
      await pause(1200);
      expect(tty.text).to.equal(final);
    });
  });

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

    it('with --json, stderr gets an error as { "error": sentence } and nothing of retries, which stdout has (docs/behaviour.md: --json)', () => {
      const stdout = new Capture(false);
      const stderr = new Capture(false);
      const sink = new ConsoleSink({ json: stdout, statusLine: false, stderr, jsonErrors: true, queue: 'q' });
      const message = 'cannot reach http://127.0.0.1:1 (connection refused)';
      sink.event({ event: 'retry', what: 'claim', attempt: 1, delayMs: 1000, message });
      sink.event({ event: 'reconnected', afterMs: 5000 });
      sink.event({ event: 'error', id: 'abc', message: 'progress not accepted: rejected: /n: must be integer' });
      sink.event({ event: 'error', message: `cannot claim from q: ${message}` });
      sink.close();
      expect(stderr.text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as unknown)).to.deep.equal([
        { error: 'abc: progress not accepted: rejected: /n: must be integer' },
        { error: `cannot claim from q: ${message}` },
      ]);
      expect(stdout.text.split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { event: string }).event)).to.deep.equal(['retry', 'reconnected', 'error', 'error']);
    });
  });
});
