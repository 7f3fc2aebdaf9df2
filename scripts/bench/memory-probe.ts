// A preload for the benchmark's server processes (`node --expose-gc --import
// dist/scripts/bench/memory-probe.js …`): on SIGUSR2 it prints one line
// `memory-probe {"rssBytes":…,"heapUsedBytes":…,"externalBytes":…,…}` on stdout, with the resident
// set as it was (what the kubelet and `process_resident_memory_bytes` see), then — after two full
// garbage collections — the heap in use and the memory outside the heap (Buffers), which is what
// the process really holds. Loads nothing but what Node has already loaded, so the floor it
// measures in a bare process is Node's own.

import { readFileSync } from 'node:fs';

/** VmRSS from /proc (process.memoryUsage().rss reads the same, but this reads nothing else). */
function residentBytes(): number {
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return match === null ? Number.NaN : Number(match[1]) * 1024;
}

const collect = (globalThis as { gc?: () => void }).gc;
if (collect === undefined) throw new Error('memory-probe needs --expose-gc');

process.on('SIGUSR2', () => {
  const rssBytes = residentBytes();
  collect();
  collect();
  const usage = process.memoryUsage();
  const sample = {
    rssBytes,
    rssAfterGcBytes: residentBytes(),
    heapUsedBytes: usage.heapUsed,
    heapTotalBytes: usage.heapTotal,
    externalBytes: usage.external,
    arrayBuffersBytes: usage.arrayBuffers,
  };
  process.stdout.write(`memory-probe ${JSON.stringify(sample)}\n`);
});
