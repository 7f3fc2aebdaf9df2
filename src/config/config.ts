// Configuration: one YAML file (optional) plus environment overrides, validated against the
// config-file schema (schema.ts, the one source of truth also used by the Helm chart) and mapped
// into a frozen object. Pure: callers pass the file text and the environment; main.ts does the I/O.

import type { RewriteRule } from '../picker/model-rewrite.js';
import { homedir } from 'node:os';
import { isAbsolute, resolve as resolvePath } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import type { ValueError } from '@sinclair/typebox/value';
import { ValueErrorType } from '@sinclair/typebox/errors';
import type { TSchema } from '@sinclair/typebox';
import { parse as parseYaml } from 'yaml';
import type { KubernetesSourceConfig } from '../endpoints/kubernetes-source.js';
import { errorMessage, firstLine } from '../util/error-message.js';
import { parseListenAddress } from '../util/host-port.js';
import type { PickerSettings } from '../picker/settings.js';
import { PickerConfigError, pickerSettings } from './picker-config.js';
import { TracingConfigError, tracingSettings } from './tracing-config.js';
import type { TracingSettings } from '../tracing/tracing-settings.js';
import { configFileSchema, DEFAULTS, LOG_LEVELS } from './schema.js';
import type { DESTINATION_FORMATS, GRPC_TRANSPORTS } from './schema.js';
import type { ConfigFile } from './schema.js';

export type LogLevel = (typeof LOG_LEVELS)[number];
export type GrpcTransport = (typeof GRPC_TRANSPORTS)[number];
export type DestinationFormat = (typeof DESTINATION_FORMATS)[number];

export interface Config {
  readonly listen: {
    /** gRPC ext_proc + health: `host:port` or `unix:///path/to.sock`. */
    readonly grpc: string;
    /** HTTP /metrics, /healthz, /readyz (and /debug/endpoints): `host:port`. */
    readonly http: string;
    /** Serve /debug/endpoints on the HTTP listener (off: 404). */
    readonly debugEndpoints: boolean;
    /** This replica's gRPC `host:port` as peers reach it: access-log entries of its streams are forwarded there. */
    readonly peerAddress?: string;
    /** TLS on the gRPC listener; absent = plaintext (sidecar, Unix socket). */
    readonly tls?: GrpcTlsConfig;
    /** Which implementation serves the gRPC listener. */
    readonly transport: GrpcTransport;
    /** Most connections the gRPC listener holds at once (native transport). */
    readonly maxConnections: number;
    /** A gRPC connection with no open stream this long is closed gracefully. */
    readonly idleTimeoutMs: number;
  };
  readonly logLevel: LogLevel;
  readonly source:
    { readonly kind: 'static'; readonly path: string } | { readonly kind: 'kubernetes'; readonly kubernetes: KubernetesSourceConfig };
  readonly routing: {
    /** Fallback endpoints handed to Envoy after the primary (Envoy retries on them on connect failure). */
    readonly fallbacks: number;
    readonly maxRequestBodyBytes: number;
    readonly maxInspectedBodyBytes: number;
    /**
     * Serve exactly this pool (a configured pool's name, or `namespace/name` of an InferencePool):
     * behind an InferencePool the gateway's cluster holds only that pool's endpoints. Absent = all pools.
     */
    readonly pool?: string;
    /**
     * How the pick is handed to Envoy. `list`: `primary,fallback,…` in `envoy.lb` metadata for
     * override_host. `single`: exactly one `ip:port` in header and metadata (ORIGINAL_DST, kgateway,
     * Envoy AI Gateway).
     */
    readonly destinationFormat: DestinationFormat;
    /** Pools whose streams get `stream_options.include_usage` added when they lack it (`*` = all). */
    readonly streamUsagePools: readonly string[];
    /** Weighted model rewrite rules (llm-d's InferenceModelRewrite rules). */
    readonly modelRewrites: readonly RewriteRule[];
  };
  readonly quarantine: {
    readonly threshold: number;
    readonly baseMs: number;
    readonly maxMs: number;
    /** Checking a replica after a mid-stream break: GET this path (2xx = alive); empty = TCP connect only. */
    readonly checkPath: string;
    readonly checkTimeoutMs: number;
  };
  /** What /metrics shows: the deprecated GIE names beside llm-d's (default) or not. */
  readonly metrics: { readonly deprecatedNames: boolean };
  /** On SIGTERM: keep answering (health NOT_SERVING) this long, so the proxy moves away first. */
  readonly shutdownDrainMs: number;
  /** Then stop taking new streams; open ones get this long before they are released to Envoy. */
  readonly shutdownGraceMs: number;
  /** Load-aware, cache-affine picking (picker-config.ts). */
  readonly picker: PickerSettings;
  /** OpenTelemetry traces: the file's `tracing` section and the OTEL_* variables (tracing-config.ts). */
  readonly tracing: TracingSettings;
}

/**
 * Certificate and key files (PEM, reloaded when they change), optionally with the CA client
 * certificates must chain to (mutual TLS), or a self-signed pair made at start.
 */
export type GrpcTlsConfig =
  | { readonly mode: 'files'; readonly certFile: string; readonly keyFile: string; readonly clientCaFile?: string }
  | { readonly mode: 'self-signed' };

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

type Raw = Record<string, unknown>;
type Env = Readonly<Record<string, string | undefined>>;

/** The environment variables that override the config file (read by applyEnvironment and toConfig; listed by `--help`). */
export const ENVIRONMENT_OVERRIDES = [
  { name: 'LLM_EXTPROC_GRPC_ADDRESS', help: 'listen.grpc: host:port or unix:///path/to.sock.' },
  { name: 'LLM_EXTPROC_HTTP_ADDRESS', help: 'listen.http: host:port of /metrics, /healthz, /readyz.' },
  { name: 'LLM_EXTPROC_PEER_ADDRESS', help: "listen.peerAddress: this replica's gRPC host:port as its peers reach it." },
  { name: 'LLM_EXTPROC_LOG_LEVEL', help: `logLevel: ${LOG_LEVELS.join(', ')}.` },
  { name: 'LLM_EXTPROC_ENDPOINTS_FILE', help: 'Use the static endpoints file at this path (wins over a kubernetes section).' },
] as const;

/**
 * Where relative paths start: those written in the config file from the file's folder (so a
 * config and the files it names move together), those from environment variables from the working
 * directory (as a shell would read them); `~/` from the home directory.
 */
export interface PathBase {
  /** The config file's folder; undefined = no config file (its default paths start from `cwd`). */
  readonly configDir: string | undefined;
  readonly cwd: string;
  readonly home: string;
}

/**
 * Builds the configuration. `fileText` is the YAML config file's content (or undefined), `env`
 * the process environment. Environment variables override the file (ENVIRONMENT_OVERRIDES).
 * An empty variable counts as unset. Every path in the result is absolute (PathBase).
 */
export function buildConfig(
  fileText: string | undefined,
  env: Env,
  base: PathBase = { configDir: undefined, cwd: process.cwd(), home: homedir() },
): Config {
  const raw = parseFile(fileText);
  // `kubernetes:` with nothing under it still selects the Kubernetes source (and then fails with
  // a useful message), so remember it before empty values are dropped.
  const hasKubernetes = 'kubernetes' in raw;
  const file = withoutNulls(raw) as Raw;
  applyEnvironment(file, env);
  if (hasKubernetes && file.kubernetes === undefined) file.kubernetes = {};
  const valid = validate(file);
  return deepFreeze(toConfig(valid, nonEmpty(env.LLM_EXTPROC_ENDPOINTS_FILE), env, pathResolvers(base, env)));
}

/** Turns the paths of the file and of the environment into absolute ones (see PathBase). */
interface PathResolvers {
  readonly fromFile: (path: string) => string;
  readonly fromEnv: (path: string) => string;
  /** listen.grpc: a relative `unix:` socket path as the other paths; env-set ones from the cwd. */
  readonly grpcAddress: (address: string) => string;
}

function pathResolvers(base: PathBase, env: Env): PathResolvers {
  const from = (start: string) => (path: string) =>
    path === '~' || path.startsWith('~/') ? resolvePath(base.home, path.slice(2)) : resolvePath(start, path);
  const fromFile = from(base.configDir ?? base.cwd);
  const fromEnv = from(base.cwd);
  const grpcFromEnv = nonEmpty(env.LLM_EXTPROC_GRPC_ADDRESS) !== undefined;
  return {
    fromFile,
    fromEnv,
    grpcAddress: (address) => {
      const parsed = parseListenAddress(address);
      if (parsed?.kind !== 'unix' || isAbsolute(parsed.path)) return address;
      return `unix://${(grpcFromEnv ? fromEnv : fromFile)(parsed.path)}`;
    },
  };
}

function parseFile(fileText: string | undefined): Raw {
  if (fileText === undefined) return {};
  let parsed: unknown;
  try {
    parsed = parseYaml(fileText);
  } catch (err) {
    throw new ConfigError(`config file is not valid YAML: ${firstLine(errorMessage(err))}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError('config file: expected a mapping at the top level');
  return parsed as Raw;
}

/** A key written with no value (`listen:`, `maxSeconds: ~`) means "use the default", as in Helm. */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (typeof value !== 'object' || value === null) return value;
  const out: Raw = {};
  for (const [key, inner] of Object.entries(value)) if (inner !== null && inner !== undefined) out[key] = withoutNulls(inner);
  return out;
}

/** Environment variables replace file values before validation, so an override also fixes a bad value. */
function applyEnvironment(file: Raw, env: Env): void {
  const grpc = nonEmpty(env.LLM_EXTPROC_GRPC_ADDRESS);
  const http = nonEmpty(env.LLM_EXTPROC_HTTP_ADDRESS);
  // Checked here, where the variable can be named; the file's values are checked with the other fields.
  if (grpc !== undefined) checkListenAddress('LLM_EXTPROC_GRPC_ADDRESS', grpc, 'grpc');
  if (http !== undefined) checkListenAddress('LLM_EXTPROC_HTTP_ADDRESS', http, 'http');
  const peer = nonEmpty(env.LLM_EXTPROC_PEER_ADDRESS);
  if (peer !== undefined) checkPeerAddress('LLM_EXTPROC_PEER_ADDRESS', peer);
  if (grpc !== undefined || http !== undefined || peer !== undefined) {
    const listen = isMapping(file.listen) ? file.listen : file.listen === undefined ? {} : undefined;
    if (listen !== undefined) {
      if (grpc !== undefined) listen.grpc = grpc;
      if (http !== undefined) listen.http = http;
      if (peer !== undefined) listen.peerAddress = peer;
      file.listen = listen;
    }
  }
  const level = nonEmpty(env.LLM_EXTPROC_LOG_LEVEL);
  if (level !== undefined) {
    if (!(LOG_LEVELS as readonly string[]).includes(level))
      throw new ConfigError(`LLM_EXTPROC_LOG_LEVEL: expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(level)}`);
    file.logLevel = level;
  }
}

/** Checks the file against the schema, then the rules that span several fields. */
function validate(file: Raw): ConfigFile {
  coerceNumericStrings(configFileSchema, file);
  const messages: string[] = [];
  const seen = new Set<string>();
  for (const error of Value.Errors(configFileSchema, file)) {
    const message = describeSchemaError(error);
    if (seen.has(message.split(':')[0] ?? message)) continue;
    seen.add(message.split(':')[0] ?? message);
    messages.push(message);
  }
  if (messages.length > 0) throw new ConfigError(messages.join('; '));
  const valid = file as ConfigFile;
  crossFieldChecks(valid);
  return valid;
}

/**
 * Numbers written as strings (`"3"`, e.g. from templated Helm values or environment-derived
 * files) are accepted where the schema wants a number; nothing else is converted.
 */
function coerceNumericStrings(schema: TSchema, value: unknown): unknown {
  if ((schema.type === 'number' || schema.type === 'integer') && typeof value === 'string' && value.trim() !== '') {
    const n = Number(value);
    return Number.isFinite(n) ? n : value;
  }
  if (schema.type === 'array' && Array.isArray(value) && isSchema(schema.items)) {
    for (let i = 0; i < value.length; i++) value[i] = coerceNumericStrings(schema.items, value[i]);
  } else if (schema.type === 'object' && isMapping(value) && isMapping(schema.properties)) {
    for (const [key, inner] of Object.entries(schema.properties)) {
      if (key in value && isSchema(inner)) value[key] = coerceNumericStrings(inner, value[key]);
    }
  }
  return value;
}

/**
 * One operator-facing line per schema error, naming the field as written in the file
 * (`kubernetes.pools[0].targetPort`). The innermost schema on the path that carries an
 * `errorMessage` supplies the wording (and the reported field); otherwise it is derived from the
 * failing schema's keywords.
 */
function describeSchemaError(error: ValueError, root: TSchema = configFileSchema): string {
  const segments = error.path.split('/').slice(1).map(unescapePointer);
  const chain = schemaChain(root, segments);
  for (let depth = chain.length - 1; depth >= 0; depth--) {
    const custom = chain[depth]?.errorMessage;
    if (typeof custom === 'string') return `${fieldName(segments.slice(0, depth))}: ${custom}`;
  }
  const field = fieldName(segments);
  if (error.type === ValueErrorType.ObjectAdditionalProperties) {
    const known = isMapping(error.schema.properties) ? Object.keys(error.schema.properties) : [];
    return `${field}: unknown setting (expected one of ${known.join(', ')})`;
  }
  if (error.type === ValueErrorType.ObjectRequiredProperty) return `${field}: required`;
  return `${field}: ${expectation(error.schema, error.value)}`;
}

function expectation(schema: TSchema, value: unknown): string {
  const got = `got ${typeof value === 'number' ? String(value) : JSON.stringify(value)}`;
  if (Array.isArray(schema.enum)) {
    const options = schema.enum.map(String);
    return `expected ${options.length === 2 ? options.join(' or ') : `one of ${options.join(', ')}`}, ${got}`;
  }
  switch (schema.type) {
    case 'object':
      return 'expected a mapping';
    case 'array':
      return 'expected a list';
    case 'boolean':
      return `expected true or false, ${got}`;
    case 'string':
      return 'expected a non-empty string';
    case 'number':
    case 'integer': {
      const min = typeof schema.minimum === 'number' ? schema.minimum : -Infinity;
      const max = typeof schema.maximum === 'number' ? schema.maximum : Infinity;
      if (typeof value !== 'number' || !Number.isFinite(value) || value < min) return `expected a number ≥ ${min}, ${got}`;
      if (value > max) return `expected a number ≤ ${max}, ${got}`;
      if (schema.type === 'integer' && !Number.isInteger(value)) return `expected a whole number, ${got}`;
      return `expected a number, ${got}`;
    }
    default:
      return `invalid value, ${got}`;
  }
}

/** The schemas along a JSON-pointer path: the root's, then one per segment (when resolvable). */
function schemaChain(root: TSchema, segments: readonly string[]): TSchema[] {
  const chain: TSchema[] = [root];
  let current: TSchema | undefined = root;
  for (const segment of segments) {
    current = current === undefined ? undefined : childSchema(current, segment);
    if (current === undefined) break;
    chain.push(current);
  }
  return chain;
}

function childSchema(schema: TSchema, segment: string): TSchema | undefined {
  if (schema.type === 'array') return isSchema(schema.items) ? schema.items : undefined;
  if (isMapping(schema.properties) && isSchema(schema.properties[segment])) return schema.properties[segment];
  if (isMapping(schema.patternProperties)) {
    const first = Object.values(schema.patternProperties)[0];
    return isSchema(first) ? first : undefined;
  }
  return undefined;
}

/** `['kubernetes', 'pools', '0', 'name']` → `kubernetes.pools[0].name`; the root is "config file". */
function fieldName(segments: readonly string[]): string {
  if (segments.length === 0) return 'config file';
  return segments.reduce(
    (name, segment, i) => (/^\d+$/.test(segment) ? `${name}[${segment}]` : i === 0 ? segment : `${name}.${segment}`),
    '',
  );
}

function unescapePointer(segment: string): string {
  return segment.replaceAll('~1', '/').replaceAll('~0', '~');
}

/**
 * The gRPC listener takes `host:port` or a `unix:` socket path; the HTTP (ops) listener `host:port`
 * only. Returns the port (0 for a socket: it takes none).
 */
function checkListenAddress(field: string, address: string, listener: 'grpc' | 'http'): number {
  const parsed = parseListenAddress(address);
  if (parsed !== undefined && (parsed.kind === 'tcp' || listener === 'grpc')) return parsed.kind === 'tcp' ? parsed.port : 0;
  const forms = listener === 'grpc' ? 'host:port or unix:///path/to.sock' : 'host:port';
  throw new ConfigError(`${field}: expected ${forms} (port 1-65535, or 0 for any free port), got ${JSON.stringify(address)}`);
}

/** A peer dials it: `host:port` with a real port (not 0, not a socket path). */
function checkPeerAddress(field: string, address: string): void {
  const parsed = parseListenAddress(address);
  if (parsed?.kind !== 'tcp' || parsed.port === 0)
    throw new ConfigError(
      `${field}: expected the host:port peers reach this replica's gRPC port on (port 1-65535), got ${JSON.stringify(address)}`,
    );
}

/** Rules that span fields. Each message names the field to change. */
function crossFieldChecks(file: ConfigFile): void {
  const grpcPort = checkListenAddress('listen.grpc', file.listen?.grpc ?? DEFAULTS.grpcAddress, 'grpc');
  const httpPort = checkListenAddress('listen.http', file.listen?.http ?? DEFAULTS.httpAddress, 'http');
  // Two listeners on one port: the second bind fails at start (EADDRINUSE), whatever the hosts.
  if (grpcPort !== 0 && grpcPort === httpPort)
    throw new ConfigError(`listen.http: port ${httpPort} is also listen.grpc's port; give each listener its own port`);
  if (file.kubernetes !== undefined && file.static !== undefined)
    throw new ConfigError('static: set together with kubernetes; choose one endpoint source');
  const tls = file.listen?.tls;
  const peerAddress = file.listen?.peerAddress;
  if (peerAddress !== undefined) {
    checkPeerAddress('listen.peerAddress', peerAddress);
    if (tls?.clientCaFile !== undefined)
      throw new ConfigError(
        'listen.peerAddress: peers forward access-log entries to each other with no client certificate, and listen.tls.clientCaFile makes every replica require one; unset one of them',
      );
  }
  if (tls !== undefined) {
    const hasCert = tls.certFile !== undefined;
    const hasKey = tls.keyFile !== undefined;
    if (tls.enabled !== true && (hasCert || hasKey)) throw new ConfigError('listen.tls.enabled: set it to true to use certFile/keyFile');
    if (hasCert !== hasKey) throw new ConfigError('listen.tls: give both certFile and keyFile, or neither for a self-signed certificate');
    if (tls.clientCaFile !== undefined && (tls.enabled !== true || !hasCert))
      throw new ConfigError(
        'listen.tls.clientCaFile: needs listen.tls.enabled with certFile and keyFile (mutual TLS serves a certificate of its own)',
      );
  }
  const q = file.quarantine;
  const baseSeconds = q?.baseSeconds ?? DEFAULTS.baseSeconds;
  const maxSeconds = q?.maxSeconds ?? DEFAULTS.maxSeconds;
  if (maxSeconds < baseSeconds)
    throw new ConfigError(`quarantine.maxSeconds: must be ≥ quarantine.baseSeconds (${baseSeconds}), got ${maxSeconds}`);
  const k8s = file.kubernetes;
  if (k8s === undefined) return;
  const pools = k8s.pools ?? [];
  const names = new Map<string, number>();
  pools.forEach((pool, i) => {
    const first = names.get(pool.name);
    if (first !== undefined)
      throw new ConfigError(
        `kubernetes.pools[${i}].name: ${JSON.stringify(pool.name)} is already the name of kubernetes.pools[${first}] (pool names must be unique)`,
      );
    names.set(pool.name, i);
  });
  const inferencePools = k8s.inferencePools?.enabled === true;
  if (pools.length === 0 && !inferencePools) throw new ConfigError('kubernetes.pools: define at least one pool, or enable inferencePools');
  if (inferencePools && (k8s.inferencePools?.namespaces ?? []).length === 0) {
    throw new ConfigError('kubernetes.inferencePools.namespaces: list at least one namespace whose InferencePools to watch');
  }
  const backoff = k8s.backoff;
  if (backoff !== undefined && backoff.maxMs < backoff.initialMs)
    throw new ConfigError(`kubernetes.backoff.maxMs: must be ≥ initialMs (${backoff.initialMs})`);
}

/** Maps the validated file onto `Config`: defaults, seconds → milliseconds, the source choice. */
function toConfig(file: ConfigFile, endpointsFile: string | undefined, env: Env, paths: PathResolvers): Config {
  const listen = file.listen ?? {};
  const routing = file.routing ?? {};
  const quarantine = file.quarantine ?? {};
  let source: Config['source'];
  if (endpointsFile !== undefined) source = { kind: 'static', path: paths.fromEnv(endpointsFile) };
  else if (file.kubernetes !== undefined) source = { kind: 'kubernetes', kubernetes: kubernetesConfig(file.kubernetes, paths) };
  else source = { kind: 'static', path: paths.fromFile(file.static?.path ?? DEFAULTS.staticPath) };
  const tls = tlsConfig(listen.tls, paths);
  return {
    listen: {
      grpc: paths.grpcAddress(listen.grpc ?? DEFAULTS.grpcAddress),
      http: listen.http ?? DEFAULTS.httpAddress,
      debugEndpoints: listen.debugEndpoints ?? false,
      ...(listen.peerAddress === undefined ? {} : { peerAddress: listen.peerAddress }),
      transport: listen.transport ?? DEFAULTS.grpcTransport,
      maxConnections: listen.maxConnections ?? DEFAULTS.maxConnections,
      idleTimeoutMs: (listen.idleTimeoutSeconds ?? DEFAULTS.idleTimeoutSeconds) * 1000,
      ...(tls === undefined ? {} : { tls }),
    },
    logLevel: file.logLevel ?? DEFAULTS.logLevel,
    source,
    routing: {
      fallbacks: routing.fallbacks ?? DEFAULTS.fallbacks,
      maxRequestBodyBytes: routing.maxRequestBodyBytes ?? DEFAULTS.maxRequestBodyBytes,
      maxInspectedBodyBytes: routing.maxInspectedBodyBytes ?? DEFAULTS.maxInspectedBodyBytes,
      ...(routing.pool === undefined ? {} : { pool: routing.pool }),
      destinationFormat: routing.destinationFormat ?? DEFAULTS.destinationFormat,
      streamUsagePools: [...(routing.streamUsagePools ?? [])],
      modelRewrites: routing.modelRewrites ?? [],
    },
    quarantine: {
      threshold: quarantine.consecutiveFailures ?? DEFAULTS.consecutiveFailures,
      baseMs: (quarantine.baseSeconds ?? DEFAULTS.baseSeconds) * 1000,
      maxMs: (quarantine.maxSeconds ?? DEFAULTS.maxSeconds) * 1000,
      checkPath: quarantine.checkPath ?? DEFAULTS.checkPath,
      checkTimeoutMs: (quarantine.checkTimeoutSeconds ?? DEFAULTS.checkTimeoutSeconds) * 1000,
    },
    metrics: { deprecatedNames: file.metrics?.deprecatedNames ?? true },
    shutdownDrainMs: (file.shutdownDrainSeconds ?? DEFAULTS.shutdownDrainSeconds) * 1000,
    shutdownGraceMs: (file.shutdownGraceSeconds ?? DEFAULTS.shutdownGraceSeconds) * 1000,
    picker: withAbsoluteTokenizerDir(pickerOrConfigError(file.picker), paths),
    tracing: tracingOrConfigError(file.tracing, env),
  };
}

function tracingOrConfigError(section: ConfigFile['tracing'], env: Env): TracingSettings {
  try {
    return tracingSettings(section, env);
  } catch (err) {
    if (err instanceof TracingConfigError) throw new ConfigError(err.message);
    throw err;
  }
}

/** The tokenizer directory, like every other path in the file, from the file's folder. */
function withAbsoluteTokenizerDir(picker: PickerSettings, paths: PathResolvers): PickerSettings {
  const precise = picker.precise;
  return precise === undefined ? picker : { ...picker, precise: { ...precise, tokenizerDir: paths.fromFile(precise.tokenizerDir) } };
}

function pickerOrConfigError(section: ConfigFile['picker']): PickerSettings {
  try {
    return pickerSettings(section);
  } catch (err) {
    if (err instanceof PickerConfigError) throw new ConfigError(err.message);
    throw err;
  }
}

/** `enabled` with both files, or with neither (self-signed at start); absent or disabled = plaintext. */
function tlsConfig(tls: NonNullable<ConfigFile['listen']>['tls'], paths: PathResolvers): GrpcTlsConfig | undefined {
  if (tls?.enabled !== true) return undefined;
  if (tls.certFile !== undefined && tls.keyFile !== undefined)
    return {
      mode: 'files',
      certFile: paths.fromFile(tls.certFile),
      keyFile: paths.fromFile(tls.keyFile),
      ...(tls.clientCaFile === undefined ? {} : { clientCaFile: paths.fromFile(tls.clientCaFile) }),
    };
  return { mode: 'self-signed' };
}

function kubernetesConfig(k8s: NonNullable<ConfigFile['kubernetes']>, paths: PathResolvers): KubernetesSourceConfig {
  const config: KubernetesSourceConfig = {
    pools: (k8s.pools ?? []).map((p) => ({
      name: p.name,
      namespace: p.namespace,
      selector: { ...p.selector },
      targetPort: p.targetPort ?? DEFAULTS.targetPort,
      models: [...p.models],
    })),
  };
  if (k8s.kubeconfigPath !== undefined) config.kubeconfigPath = paths.fromFile(k8s.kubeconfigPath);
  const ip = k8s.inferencePools;
  if (ip?.enabled === true) {
    config.inferencePools = { enabled: true, namespaces: [...(ip.namespaces ?? [])] };
    if (ip.modelsAnnotation !== undefined) config.inferencePools.modelsAnnotation = ip.modelsAnnotation;
    if (ip.objectives === false) config.inferencePools.objectives = false;
  }
  if (k8s.backoff !== undefined) config.backoff = { initialMs: k8s.backoff.initialMs, maxMs: k8s.backoff.maxMs };
  if (k8s.timeouts !== undefined) {
    config.timeouts = {};
    if (k8s.timeouts.listSeconds !== undefined) config.timeouts.listSeconds = k8s.timeouts.listSeconds;
    if (k8s.timeouts.watchSeconds !== undefined) config.timeouts.watchSeconds = k8s.timeouts.watchSeconds;
  }
  return config;
}

function isMapping(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isSchema(value: unknown): value is TSchema {
  return isMapping(value);
}

/** An empty environment variable means "not set" (Kubernetes renders unset values as ""). */
function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
