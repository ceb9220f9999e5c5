#!/usr/bin/env node
// svcq as `npm run build` bundles it into dist/cli/ (src/cli/write-bundle.ts): oclif and every
// command in a few files of one folder, and src/cli/main.ts, which runs them.
import { main } from '../dist/cli/run.js';

await main(import.meta.url);
