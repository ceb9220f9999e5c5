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

/**
 * The candidates nearest to `word`, if near enough to be what was meant: every one equally near,
 * likeliest first ({@link likeness}), in the order listed where that does not tell them apart.
 */
function nearest(word: string, candidates: string[]): string[] {
  const typed = word.toLowerCase();
  const limit = Math.max(1, Math.min(3, Math.floor(typed.length / 2)));
  let best = Infinity;
  let found: string[] = [];
  for (const id of candidates) {
    const distance = editDistance(typed, id);
    if (distance > limit || distance > best) continue;
    if (distance < best) found = [];
    best = distance;
    found.push(id);
  }
  return found.sort((a, b) => likeness(typed, b) - likeness(typed, a));
}

/**
 * How much of its start and its end a candidate shares with what was typed. Of two commands one
 * edit away, "queus" is likelier "queues" (a letter left out, its end kept) than "queue" (its last
 * letter changed): 5 letters of "queues" are where they were typed, 4 of "queue".
 */
function likeness(typed: string, id: string): number {
  const most = Math.min(typed.length, id.length);
  let start = 0;
  while (start < most && typed[start] === id[start]) start++;
  let end = 0;
  while (end < most - start && typed[typed.length - 1 - end] === id[id.length - 1 - end]) end++;
  return start + end;
}

export interface Suggestion {
  /** What was typed as the command, in words: "wokr", or "logs shwo". */
  typed: string;
  /** The command ids meant (colon-separated, as oclif names them): the one nearest, or all those equally near, likeliest first; none when none is near enough. */
  ids: string[];
  /** The words after the command, to run the suggestion with. */
  rest: string[];
}

/**
 * What a mistyped command line most likely meant. Only the command words are compared, never its
 * arguments: `svcq wokr thumbnails` is compared as "wokr" against the first word of every command
 * id (so a queue name cannot pull the guess towards `logs show`). When the first word is right
 * (`svcq logs shwo`), the second is compared against the commands under it. Two commands equally
 * near (`svcq queus`: "queue" and "queues") are both suggested.
 */
export function suggestCommand(words: string[], commandIds: string[]): Suggestion {
  const [first = '', second] = words;
  const firstWords = [...new Set(commandIds.map((id) => id.split(':')[0]!))];
  if (firstWords.includes(first) && second !== undefined) {
    const under = commandIds.filter((id) => id.startsWith(`${first}:`)).map((id) => id.slice(first.length + 1));
    return { typed: `${first} ${second}`, ids: nearest(second, under).map((meant) => `${first}:${meant}`), rest: words.slice(2) };
  }
  // A first word that is only a topic (token) is suggested with its one command, if it has just one.
  const ids = nearest(first, firstWords).map((meant) => {
    if (commandIds.includes(meant)) return meant;
    const under = commandIds.filter((c) => c.startsWith(`${meant}:`));
    return under.length === 1 ? under[0]! : meant;
  });
  return { typed: first, ids, rest: words.slice(1) };
}
