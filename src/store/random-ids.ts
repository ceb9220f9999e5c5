import { randomBytes } from 'node:crypto';

/**
 * Ids of 16 random lowercase hex characters (decisions §3.5), cut from random bytes drawn 4 KiB at
 * a time: one call into the system's generator per 512 ids rather than one per id.
 */
export class RandomIds {
  private bytes = Buffer.alloc(0);
  private at = 0;

  next(): string {
    if (this.at + 8 > this.bytes.length) {
      this.bytes = randomBytes(4096);
      this.at = 0;
    }
    const id = this.bytes.toString('hex', this.at, this.at + 8);
    this.at += 8;
    return id;
  }
}
