// The memory settings the entry applies (src/process-settings.ts): that they really bound V8's
// young generation when set at run time (a Node upgrade that stopped honouring the flag would make
// this fail, not quietly cost memory again), and that an operator's own choice wins.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { flagsToSet, startupFlags } from '../../../src/process-settings.js';

const SETTINGS = new URL('../../../src/process-settings.js', import.meta.url).href;

/**
 * The largest size (bytes) a heap space reaches in a child process that allocates a stream of
 * objects, each kept for the next `keep` allocations (a request's objects live while it is in
 * flight): short-lived ones die young; long enough ones are promoted and die old.
 */
function peakSpaceBytes(space: 'new_space', apply: boolean, keep: number): number {
  const script = `
    import { getHeapSpaceStatistics } from 'node:v8';
    const { applyProcessSettings } = await import(${JSON.stringify(SETTINGS)});
    if (${apply}) applyProcessSettings([], undefined);
    const size = () => getHeapSpaceStatistics().find((s) => s.space_name === ${JSON.stringify(space)}).space_size;
    const ring = new Array(${keep});
    let peak = size();
    for (let i = 0; i < 4_000_000; i++) {
      ring[i % ${keep}] = { id: i, name: 'request-' + i, pieces: [i, i + 1] };
      if (i % 1000 === 0) peak = Math.max(peak, size());
    }
    process.stdout.write(String(peak));
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(run.status, 0, run.stderr);
  return Number(run.stdout);
}

const MiB = 1024 * 1024;

void describe('process settings', () => {
  void it('while the program starts, keep the young generation at its initial size under an allocation load that grows it eightfold without them', () => {
    const without = peakSpaceBytes('new_space', false, 200);
    const withSettings = peakSpaceBytes('new_space', true, 200);
    assert.ok(without >= 8 * MiB, `without the settings the load grows the young generation (${without / MiB} MiB)`);
    assert.ok(withSettings <= 2 * MiB, `with them it stays at its initial 2 MiB (${withSettings / MiB} MiB)`);
  });

  /** Peak young generation (new space) while starting and once started, streams ending every thousand allocations. */
  const youngGenerationPeaks = (operatorFlags: string): { starting: number; started: number; cap: number } => {
    const script = `
      import { getHeapSpaceStatistics } from 'node:v8';
      const { applyProcessSettings, readGarbageCollector, startupDone, YOUNG_GENERATION_CAP_BYTES } = await import(${JSON.stringify(SETTINGS)});
      applyProcessSettings(${operatorFlags}, undefined);
      const observer = readGarbageCollector();
      const size = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
      const ring = new Array(200);
      const peakUnderLoad = (allocations) => {
        let peak = size();
        for (let i = 0; i < allocations; i++) {
          ring[i % 200] = { id: i, name: 'request-' + i, pieces: [i, i + 1] };
          if (i % 1000 === 0) {
            observer.streamEnded();
            peak = Math.max(peak, size());
          }
        }
        return peak;
      };
      const starting = peakUnderLoad(2_000_000);
      startupDone();
      const started = peakUnderLoad(4_000_000);
      process.stdout.write(JSON.stringify({ starting, started, cap: YOUNG_GENERATION_CAP_BYTES }));
    `;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(run.status, 0, run.stderr);
    return JSON.parse(run.stdout) as { starting: number; started: number; cap: number };
  };

  void it('once started, let the young generation grow under load to its ceiling (4 MiB per semi-space) and no further', () => {
    // Streams end every thousand allocations, as a server's do under load: that is when the ceiling is looked at.
    const { starting, started, cap } = youngGenerationPeaks('[]');
    assert.equal(cap, 8 * MiB);
    assert.ok(starting <= 2 * MiB, `while starting it stays at its initial 2 MiB (${starting / MiB} MiB)`);
    assert.ok(started > 2 * MiB, `once started the load grows it (${started / MiB} MiB)`);
    assert.ok(started <= cap, `up to the ceiling and no further (${started / MiB} MiB)`);
  });

  void it('leave the young generation to V8 when the operator sized it: no ceiling of ours', () => {
    // As if started with --max-semi-space-size=16 (the child itself runs with V8's default, 16 MiB).
    const { starting, started, cap } = youngGenerationPeaks(`['--max-semi-space-size=16']`);
    assert.ok(starting > 2 * MiB, `nothing holds it while starting (${starting / MiB} MiB)`);
    assert.ok(started > cap, `nor once started (${started / MiB} MiB)`);
  });

  void it('run each scavenge on the main thread alone, where V8 would split it over helper threads', () => {
    // --trace-parallel-scavenge prints one line per task of each scavenge; --trace-gc one per scavenge.
    const run = (apply: boolean): { tasks: number; scavenges: number } => {
      const script = `
        const { applyProcessSettings } = await import(${JSON.stringify(SETTINGS)});
        if (${apply}) applyProcessSettings([], undefined);
        let kept = [];
        for (let i = 0; i < 2_000_000; i++) {
          const o = { id: i, pieces: [i] };
          if (i % 10 === 0) kept.push(o);
          if (kept.length > 50_000) kept = [];
        }
      `;
      const out = spawnSync(process.execPath, ['--trace-gc', '--trace-parallel-scavenge', '--input-type=module', '-e', script], {
        encoding: 'utf8',
        timeout: 120_000,
      });
      assert.equal(out.status, 0, out.stderr);
      return { tasks: out.stdout.match(/scavenge\[/g)?.length ?? 0, scavenges: out.stdout.match(/: Scavenge /g)?.length ?? 0 };
    };
    const without = run(false);
    const withSettings = run(true);
    assert.ok(
      without.tasks > without.scavenges,
      `V8 splits scavenges without the settings (${without.tasks} tasks, ${without.scavenges} scavenges)`,
    );
    assert.ok(
      withSettings.scavenges > 0 && withSettings.tasks === withSettings.scavenges,
      `one task per scavenge with them (${withSettings.tasks} tasks, ${withSettings.scavenges} scavenges)`,
    );
  });

  void it('optimize nothing while the program starts, and the hot code again once it has', () => {
    // --trace-opt prints a line for each function the optimizing compiler finishes.
    const script = `
      const { applyProcessSettings, startupDone } = await import(${JSON.stringify(SETTINGS)});
      applyProcessSettings([], undefined);
      function startupWork(n) { let s = 0; for (let i = 0; i < n; i++) s += (i * 7) % 13; return s; }
      for (let k = 0; k < 2000; k++) startupWork(1000);
      console.log('-- started --');
      startupDone();
      function requestWork(n) { let s = 0; for (let i = 0; i < n; i++) s += (i * 5) % 11; return s; }
      for (let k = 0; k < 2000; k++) requestWork(1000);
    `;
    const out = spawnSync(process.execPath, ['--trace-opt', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(out.status, 0, out.stderr);
    const [duringStart, afterStart] = out.stdout.split('-- started --');
    assert.doesNotMatch(duringStart ?? '', /completed optimizing/, 'nothing optimized while starting');
    assert.match(afterStart ?? '', /completed optimizing.*requestWork/, 'hot code optimized once started');
  });

  void it('scavenge on demand: dead Buffers of socket reads are freed at once, where V8 would wait for a full collection', () => {
    // A process that reads 1 MiB bodies and lets them die while allocating next to nothing on the
    // heap (a long prompt): V8's external memory climbs until a mark-compact, unless scavenged.
    const run = (scavenge: boolean): number => {
      const script = `
        const { getHeapStatistics } = await import('node:v8');
        const { applyProcessSettings, readGarbageCollector } = await import(${JSON.stringify(SETTINGS)});
        applyProcessSettings([], undefined);
        const garbage = ${scavenge} ? readGarbageCollector() : undefined;
        if (${scavenge} && garbage === undefined) throw new Error('no scavenge on demand');
        // A heap the size of a replica's after a load (about 13 MiB), live throughout.
        const held = Array.from({ length: 120000 }, (_, i) => ({ id: i, name: 'object-' + i, pieces: [i, i + 1] }));
        const start = getHeapStatistics().external_memory;
        let highest = 0;
        for (let prompt = 0; prompt < 60; prompt++) {
          for (let i = 0; i < 16; i++) {
            const read = Buffer.alloc(64 * 1024, prompt); // each socket read a Buffer of its own
            garbage?.read(read.length);
          }
          garbage?.streamEnded(); // the prompt answered
          highest = Math.max(highest, getHeapStatistics().external_memory - start);
          await new Promise((resolve) => setImmediate(resolve));
        }
        process.stdout.write('highest ' + highest / 1048576 + ' held ' + held.length + '\\n');
      `;
      const out = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
      assert.equal(out.status, 0, out.stderr);
      return Number(/highest ([\d.]+)/.exec(out.stdout)?.[1]);
    };
    const withoutMiB = run(false);
    const withMiB = run(true);
    // 60 MiB read: without, every Buffer waits for a full collection (measured 31-58 MiB dead at
    // once: V8's old-generation budget sets off one at some point); with, a scavenge per 2-3 MiB.
    assert.ok(withoutMiB >= 24, `without, dead Buffers pile up (${withoutMiB} MiB)`);
    // Measured 3-8 MiB, on a busy machine too: the budget, the low point learnt with a prompt in it,
    // the prompt in hand, and what V8's background sweeper has not yet counted as freed.
    assert.ok(withMiB <= 14, `with, a few MiB at most are dead at once (${withMiB} MiB)`);
  });

  void it('leave alone what the operator set on the command line (node flags or NODE_OPTIONS)', () => {
    const all = ['--semi-space-growth-factor=1', '--no-parallel-scavenge'];
    assert.deepEqual(flagsToSet([], undefined), all);
    assert.deepEqual(flagsToSet(['--max-old-space-size=256'], '--enable-source-maps'), all);
    assert.deepEqual(flagsToSet(['--max-semi-space-size=8'], undefined), ['--no-parallel-scavenge']);
    assert.deepEqual(flagsToSet([], '--enable-source-maps --max_semi_space_size=4'), ['--no-parallel-scavenge']);
    assert.deepEqual(flagsToSet([], '--min-semi-space-size=2'), ['--no-parallel-scavenge']);
    assert.deepEqual(flagsToSet(['--semi-space-growth-factor=2'], undefined), ['--no-parallel-scavenge']);
    assert.deepEqual(flagsToSet(['--parallel-scavenge'], undefined), ['--semi-space-growth-factor=1']);
    assert.deepEqual(flagsToSet([], '--single-threaded-gc'), ['--semi-space-growth-factor=1']);
    assert.deepEqual(startupFlags([], undefined), [{ set: '--no-turbofan', undo: '--turbofan' }]);
    assert.deepEqual(startupFlags(['--no-opt'], undefined), []);
    assert.deepEqual(startupFlags([], '--jitless'), []);
  });
});
