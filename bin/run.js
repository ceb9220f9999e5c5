#!/usr/bin/env node
// oclif and every command, bundled by `npm run build` (src/cli/write-bundle.ts): a start reads a
// few files of dist/cli/ instead of finding oclif's many in node_modules.
import { execute } from '../dist/cli/run.js';

await execute({ dir: import.meta.url });
