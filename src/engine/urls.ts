/** decisions §9: the URLs a push queue or a callback names: absolute http(s), no credentials. */

/** The longest URL a definition or a post may name. */
export const MAX_URL_LENGTH = 2048;

/** `text` as an absolute http(s) URL, or null. */
export function httpUrl(text: string): URL | null {
  if (text.length > MAX_URL_LENGTH) return null;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return url.protocol === 'http:' || url.protocol === 'https:' ? url : null;
}

/** Why `text` cannot be a push or callback URL (one phrase), or null when it can. */
export function urlProblem(text: string): string | null {
  if (text.length > MAX_URL_LENGTH) return `must be at most ${MAX_URL_LENGTH} characters`;
  const url = httpUrl(text);
  if (url === null) return 'must be an absolute http:// or https:// URL';
  if (url.username !== '' || url.password !== '') return 'may not carry a user name or password';
  return null;
}
