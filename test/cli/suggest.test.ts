import { expect } from 'chai';
import { editDistance, suggestCommand } from '../../src/cli/suggest.js';

const IDS = ['cancel', 'item', 'logs', 'logs:show', 'manifest', 'payload', 'post', 'serve', 'stats', 'stats:now', 'stats:show', 'sync', 'tasks', 'tasks:show', 'token:new', 'version', 'work', 'help'];

describe('suggestCommand: the command meant, from the command words alone', () => {
  it('counts a swap of two neighbouring letters as one edit', () => {
    expect(editDistance('wokr', 'work')).to.equal(1);
    expect(editDistance('pots', 'post')).to.equal(1);
    expect(editDistance('item', 'item')).to.equal(0);
    expect(editDistance('', 'abc')).to.equal(3);
  });

  it('compares the first word with the first word of every command, whatever the arguments', () => {
    expect(suggestCommand(['wokr', 'thumbnails'], IDS)).to.deep.equal({ typed: 'wokr', id: 'work', rest: ['thumbnails'] });
    expect(suggestCommand(['pots', 'q'], IDS)).to.deep.equal({ typed: 'pots', id: 'post', rest: ['q'] });
    expect(suggestCommand(['itme', 'q', '0123456789abcdef'], IDS)).to.deep.equal({ typed: 'itme', id: 'item', rest: ['q', '0123456789abcdef'] });
    expect(suggestCommand(['manifset'], IDS).id).to.equal('manifest');
  });

  it('compares the second word with the commands under a first word that is right', () => {
    expect(suggestCommand(['logs', 'shwo'], IDS)).to.deep.equal({ typed: 'logs shwo', id: 'logs:show', rest: [] });
    expect(suggestCommand(['stats', 'nwo', 'x'], IDS)).to.deep.equal({ typed: 'stats nwo', id: 'stats:now', rest: ['x'] });
    expect(suggestCommand(['token', 'old'], IDS).id).to.equal(undefined);
  });

  it('suggests a topic by its only command, and nothing when no command is near', () => {
    expect(suggestCommand(['tokne', 'new'], IDS)).to.deep.equal({ typed: 'tokne', id: 'token:new', rest: ['new'] });
    expect(suggestCommand(['qwertyuiop'], IDS).id).to.equal(undefined);
    expect(suggestCommand(['x'], IDS).id).to.equal(undefined);
  });
});
