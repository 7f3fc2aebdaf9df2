// Preloaded (`node --import`) into the real llm-extproc process by tests of its crash policy: on
// SIGUSR2 it throws from a timer or rejects a promise nobody awaits, as a bug in a library
// callback would. Which one: LLM_EXTPROC_TEST_CRASH=exception|rejection. Never part of the program.

process.on('SIGUSR2', () => {
  if (process.env.LLM_EXTPROC_TEST_CRASH === 'rejection') {
    void Promise.reject(new Error('injected unhandled rejection'));
  } else {
    setImmediate(() => {
      throw new Error('injected uncaught exception');
    });
  }
});

export {};
