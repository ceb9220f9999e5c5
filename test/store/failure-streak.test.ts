import { expect } from 'chai';
import { FailureStreak } from '../../src/store/failure-streak.js';

describe('FailureStreak: a run of failures told once when it starts and once when it ends (decisions §6: the server keeps running and says so)', () => {
  it('tells the first failure of a streak and the success that ends it, nothing between, and builds the line only when it tells it', () => {
    const lines: string[] = [];
    let built = 0;
    const streak = new FailureStreak((l) => lines.push(l), 'works again');
    streak.succeeded();
    for (let i = 0; i < 3; i++) streak.failed(() => `failed ${++built}`);
    streak.succeeded();
    streak.succeeded();
    streak.failed(() => `failed ${++built}`);
    expect(lines).to.deep.equal(['failed 1', 'works again', 'failed 2']);
    expect(built).to.equal(2);
  });
});
