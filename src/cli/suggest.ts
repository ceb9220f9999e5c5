/**
 * Edit distance with adjacent transpositions (optimal string alignment): "wokr" is one edit from
 * "work", the mistake a hand makes most.
 */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** The candidate nearest to `word`, if it is near enough to be what was meant (ties go to the first listed). */
function nearest(word: string, candidates: string[]): string | undefined {
  const limit = Math.max(1, Math.min(3, Math.floor(word.length / 2)));
  let best: { id: string; distance: number } | undefined;
  for (const id of candidates) {
    const distance = editDistance(word.toLowerCase(), id);
    if (distance <= limit && (!best || distance < best.distance)) best = { id, distance };
  }
  return best?.id;
}

export interface Suggestion {
  /** What was typed as the command, in words: "wokr", or "logs shwo". */
  typed: string;
  /** The command id meant (colon-separated, as oclif names it), if one is near enough. */
  id?: string;
  /** The words after the command, to run the suggestion with. */
  rest: string[];
}

/**
 * What a mistyped command line most likely meant. Only the command words are compared, never its
 * arguments: `svcq wokr thumbnails` is compared as "wokr" against the first word of every command
 * id (so a queue name cannot pull the guess towards `logs show`). When the first word is right
 * (`svcq logs shwo`), the second is compared against the commands under it.
 */
export function suggestCommand(words: string[], commandIds: string[]): Suggestion {
  const [first = '', second] = words;
  const firstWords = [...new Set(commandIds.map((id) => id.split(':')[0]!))];
  if (firstWords.includes(first) && second !== undefined) {
    const under = commandIds.filter((id) => id.startsWith(`${first}:`)).map((id) => id.slice(first.length + 1));
    const meant = nearest(second, under);
    return { typed: `${first} ${second}`, id: meant === undefined ? undefined : `${first}:${meant}`, rest: words.slice(2) };
  }
  const meant = nearest(first, firstWords);
  // A first word that is only a topic (token) is suggested with its one command, if it has just one.
  const id = meant === undefined || commandIds.includes(meant) ? meant : (() => {
    const under = commandIds.filter((c) => c.startsWith(`${meant}:`));
    return under.length === 1 ? under[0] : meant;
  })();
  return { typed: first, id, rest: words.slice(1) };
}
