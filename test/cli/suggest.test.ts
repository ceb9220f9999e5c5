import { expect } from 'chai';
import { editDistance, suggestCommand } from '../../src/cli/suggest.js';

const IDS = ['cancel', 'item', 'logs', 'logs:show', 'manifest', 'payload', 'post', 'queue', 'queues', 'serve', 'stats', 'stats:now', 'stats:show', 'sync', 'tasks', 'tasks:show', 'token:new', 'top', 'version', 'work', 'help'];

describe('suggestCommand: the command meant, from the command words alone', () => {
  it('counts a swap of two neighbouring letters as one edit', () => {
    expect(editDistance('wokr', 'work')).to.equal(1);
    expect(editDistance('pots', 'post')).to.equal(1);
    expect(editDistance('item', 'item')).to.equal(0);
    expect(editDistance('', 'abc')).to.equal(3);
  });

  it('compares the first word with the first word of every command, whatever the arguments', () => {
    expect(suggestCommand(['wokr', 'thumbnails'], IDS)).to.deep.equal({ typed: 'wokr', ids: ['work'], rest: ['thumbnails'] });
    expect(suggestCommand(['pots', 'q'], IDS)).to.deep.equal({ typed: 'pots', ids: ['post'], rest: ['q'] });
    expect(suggestCommand(['itme', 'q', '0123456789abcdef'], IDS)).to.deep.equal({ typed: 'itme', ids: ['item'], rest: ['q', '0123456789abcdef'] });
    expect(suggestCommand(['manifset'], IDS).ids).to.deep.equal(['manifest']);
  });

  it('compares the second word with the commands under a first word that is right', () => {
    expect(suggestCommand(['logs', 'shwo'], IDS)).to.deep.equal({ typed: 'logs shwo', ids: ['logs:show'], rest: [] });
    expect(suggestCommand(['stats', 'nwo', 'x'], IDS)).to.deep.equal({ typed: 'stats nwo', ids: ['stats:now'], rest: ['x'] });
    expect(suggestCommand(['token', 'old'], IDS).ids).to.deep.equal([]);
  });

  it('suggests every command equally near, likeliest first: "queus" is "queues" with a letter left out, or "queue" with its last one changed', () => {
    expect(suggestCommand(['queus'], IDS)).to.deep.equal({ typed: 'queus', ids: ['queues', 'queue'], rest: [] });
    expect(suggestCommand(['quees', 'x'], IDS).ids).to.deep.equal(['queues']);
    expect(suggestCommand(['queeu'], IDS).ids).to.deep.equal(['queue']);
    expect(suggestCommand(['queeus'], IDS).ids).to.deep.equal(['queues']);
  });

  it('suggests a topic by its only command, and nothing when no command is near', () => {
    expect(suggestCommand(['tokne', 'new'], IDS)).to.deep.equal({ typed: 'tokne', ids: ['token:new'], rest: ['new'] });
    expect(suggestCommand(['qwertyuiop'], IDS).ids).to.deep.equal([]);
    expect(suggestCommand(['x'], IDS).ids).to.deep.equal([]);
  });
});
