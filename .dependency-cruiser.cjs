// `npm run lint` runs this with dependency-cruiser: the layers of src/ (docs/architecture.md) and no
// import cycles anywhere. Type-only imports count (tsPreCompilationDeps): a cycle of types is still
// two modules that cannot be understood apart.
//
// Two stacks meet in request/: the protocol stack (http2 ← grpc ← extproc) knows nothing of what we
// do with a request, and the domain folders (picker, endpoints, errors, inspect, metrics, config,
// tracing) know nothing of the protocol. Between request/ and the domain sits routing/ (model →
// pools → a pick, flow control's queues, the affinity key): it knows the picker and the endpoints,
// never the protocol, the stream, or what observes it (metrics, tracing, config). Above request/
// sit the outcome sinks (outcomes/: what a request's outcomes mean to metrics, traces, logs and
// passive health), which only the app composes. The app (app.ts,
// main.ts, cluster.ts, cli.ts, check-config.ts) wires everything; util/ and types/ are at the
// bottom; nothing in src/ reaches build-time code, scripts or tests.
const PROTOCOL = ['http2', 'grpc', 'extproc'];
const DOMAIN = ['picker', 'kv-cache', 'endpoints', 'errors', 'inspect', 'metrics', 'config', 'tracing'];
const APP = '^src/(app|main|program|process-settings|cluster|cli|check-config)\\.ts$';

/** What each folder must not import. */
const FORBIDDEN = {
  http2: ['grpc', 'extproc', 'outcomes', 'request', 'routing', 'ops', ...DOMAIN],
  grpc: ['extproc', 'outcomes', 'request', 'routing', 'ops', ...DOMAIN],
  extproc: ['http2', 'outcomes', 'request', 'routing', 'ops', ...DOMAIN],
  outcomes: [...PROTOCOL, 'ops'],
  request: ['http2', 'grpc', 'outcomes', 'ops'],
  routing: [...PROTOCOL, 'outcomes', 'request', 'ops', 'inspect', 'metrics', 'config', 'tracing'],
  ops: [...PROTOCOL, 'outcomes', 'request', 'routing'],
  ...Object.fromEntries(DOMAIN.map((folder) => [folder, [...PROTOCOL, 'outcomes', 'request', 'routing', 'ops']])),
  util: [...PROTOCOL, 'outcomes', 'request', 'routing', 'ops', ...DOMAIN],
};

const either = (folders) => `^src/(${folders.join('|')})/`;

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle: break it by moving the shared piece down a layer.',
      from: {},
      to: { circular: true },
    },
    ...Object.entries(FORBIDDEN).map(([folder, forbidden]) => ({
      name: `layer-${folder}`,
      severity: 'error',
      comment: `src/${folder} sits below ${forbidden.join(', ')} and the app (docs/architecture.md).`,
      from: { path: `^src/${folder}/` },
      to: { path: [either(forbidden), APP] },
    })),
    {
      name: 'src-stays-production',
      severity: 'error',
      comment: 'Production code must not import build-time code, scripts or tests.',
      from: { path: '^src/' },
      to: { path: '^(tools|scripts|test)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(dist|node_modules)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
