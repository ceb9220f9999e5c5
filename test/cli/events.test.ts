import { expect } from 'chai';
import { eventLine } from '../../src/cli/view/events.js';
import { withoutColour } from '../support/colour.js';

describe('svcq tasks show prints one line per task event (decisions §5)', () => {
  withoutColour();

  it("a worker's name is printed with its control characters as ?: a name cannot write to the terminal or break the line", () => {
    // Any queue user names the worker in its claim.
    const line = eventLine({ ts: 1_800_000_000_000, host: 'jobs.test', queue: 'q', id: '72181742e04e844e', event: 'claimed', attempts: 1, worker: 'bad\u001b]0;title\u0007\u001b[31mred\nnext', status: 'claimed' });
    // eslint-disable-next-line no-control-regex -- looking for control characters
    expect(line).not.to.match(/[\u0000-\u001f\u007f-\u009f]/);
    expect(line).to.include('worker bad?]0;title??[31mred?next  status claimed');
  });
});
