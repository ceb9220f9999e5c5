import { httpUrl } from '../engine/urls.js';

/**
 * decisions §9: the URL prefixes a server may call (push targets and callbacks), from
 * `--push-allow` / `SVCQ_PUSH_ALLOW`. Off by default: with no prefix, every URL is outside.
 *
 * A URL and a prefix are compared in their WHATWG-normalised form (`new URL(...).href`): the
 * scheme and host in lower case, a default port dropped, an empty path written `/`. So
 * `https://hooks.example.com` allows `https://hooks.example.com/x` and never
 * `https://hooks.example.com.evil.test/`, and a URL that hides another host behind user info
 * (`http://127.0.0.1:9000@evil.test/`) is compared by the host it really names.
 */
export class PushAllowList {
  private constructor(readonly prefixes: readonly string[]) {}

  /** No URL allowed. */
  static readonly none = new PushAllowList([]);

  /**
   * The list from the flag's values; each value may itself hold several prefixes separated by
   * commas (the environment's form). Throws one sentence naming a prefix that is not an absolute
   * http or https URL.
   */
  static parse(values: readonly string[] | undefined): PushAllowList {
    const prefixes: string[] = [];
    for (const value of values ?? []) {
      for (const part of value.split(',')) {
        const raw = part.trim();
        if (raw === '') continue;
        const url = httpUrl(raw);
        if (url === null) throw new Error(`--push-allow "${raw}" is not an absolute http:// or https:// URL prefix`);
        prefixes.push(url.href);
      }
    }
    return prefixes.length === 0 ? PushAllowList.none : new PushAllowList(prefixes);
  }

  /** Whether the server may call `url` (checked at every call: a list made shorter by a restart is obeyed at once). */
  allows(url: string): boolean {
    if (this.prefixes.length === 0) return false;
    const parsed = httpUrl(url);
    if (parsed === null || parsed.username !== '' || parsed.password !== '') return false;
    const href = parsed.href;
    return this.prefixes.some((p) => href.startsWith(p));
  }

  /** The sentence for a URL outside the list, naming the URL. */
  refusal(url: string): string {
    return this.prefixes.length === 0
      ? `"${url}" is not a URL this server may call: it was started without --push-allow`
      : `"${url}" is not a URL this server may call: it is outside every --push-allow prefix (${this.prefixes.join(', ')})`;
  }
}
