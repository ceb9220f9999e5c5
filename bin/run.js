#!/usr/bin/env node
// oclif and every command, bundled by `npm run build` (src/cli/write-bundle.ts): a start reads a
// few files of dist/cli/ instead of finding oclif's many in node_modules.
import { execute, prestartServer } from '../dist/cli/run.js';

// `svcq serve` has its server thread load the server while oclif loads here (server-thread.ts).
if (process.argv[2] === 'serve') await prestartServer();
await execute({ dir: import.meta.url });
