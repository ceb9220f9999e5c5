import { expect } from 'chai';
import { queueDetailView, serverNowOf } from '../../src/cli/view/queues.js';
import type { QueueDetail } from '../../src/operators/answers.js';
import { withoutColour } from '../support/colour.js';

const NOW = 1_700_000_000_000;

/** A queue whose server clock runs `skew` ms ahead of this machine's: its times are "later" by that much. */
function detailFrom(skew: number): QueueDetail {
  return {
    host: 'jobs.test',
    name: 'skewed',
    counts: { pending: 2, claimed: 1, processing: 0, finished: 0, failed: 0, timedout: 0, cancelled: 0 },
    // Measured by the server: its now minus the oldest item's postedAt.
    oldestPendingAgeMs: 90_000,
    rates: { posted: 0, claimed: 0, finished: 0, failed: 0 },
    oldest: [
      { id: 'aaaaaaaaaaaaaaaa', postedAt: NOW + skew - 90_000, attempts: 0 },
      { id: 'cccccccccccccccc', postedAt: NOW + skew - 30_000, attempts: 0 },
    ],
    leases: [{ id: 'bbbbbbbbbbbbbbbb', worker: 'w', until: NOW + skew + 30_000, attempts: 1 }],
  };
}

describe('svcq queue shows ages and lease ends against the server\'s clock (decisions §5.1)', () => {
  withoutColour();

  it('takes the server\'s now from the oldest pending item\'s age when this machine\'s clock is off by more than two seconds', () => {
    const skew = -5 * 60_000;
    expect(serverNowOf(detailFrom(skew), NOW)).to.equal(NOW + skew);
    const view = queueDetailView(detailFrom(skew), serverNowOf(detailFrom(skew), NOW));
    expect(view.split('\n').find((l) => l.includes('aaaaaaaaaaaaaaaa'))).to.include('1m 30s');
    expect(view.split('\n').find((l) => l.includes('cccccccccccccccc'))).to.include('30s');
    expect(view.split('\n').find((l) => l.includes('bbbbbbbbbbbbbbbb'))).to.match(/\b30s\b/);
  });

  it('keeps this machine\'s now when the clocks agree to within two seconds, or when nothing is pending to tell', () => {
    expect(serverNowOf(detailFrom(1500), NOW)).to.equal(NOW);
    expect(serverNowOf({ ...detailFrom(60_000), oldest: [], oldestPendingAgeMs: null }, NOW)).to.equal(NOW);
  });
});
