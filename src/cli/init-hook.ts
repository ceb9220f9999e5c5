import type { Hook } from '@oclif/core';
import { applyNoColor } from './color.js';

/** Runs before every command, including help and the not-found hook. */
const hook: Hook<'init'> = async function () {
  applyNoColor();
};

export default hook;
