import { randomBytes } from 'node:crypto';
import { isName } from './names.js';
import { sha256Hex } from './manifest.js';
import type { UserDefinition } from './schemas.js';

/** A fresh user token, its sha256, and the user definition that holds it when a name was given. */
export interface NewToken {
  token: string;
  tokenSha256: string;
  definition?: UserDefinition;
}

/** 32 random bytes as hex (decisions §2.3); the server will only ever see the sha256. */
export function newUserToken(user?: string): NewToken | { error: string } {
  if (user !== undefined) {
    if (!isName(user)) {
      return { error: `--user "${user}" is not a valid name (lowercase letters, digits, "_" and "-", starting with a letter or digit, at most 64 characters)` };
    }
    if (user === 'public') return { error: '--user "public" is reserved for requests made without a token' };
  }
  const token = randomBytes(32).toString('hex');
  const tokenSha256 = sha256Hex(token);
  return user === undefined ? { token, tokenSha256 } : { token, tokenSha256, definition: { 'svc-user-name': user, tokenSha256 } };
}
