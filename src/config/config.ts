// Configuration: one YAML file (optional) plus environment overrides, validated into a frozen
// object. Pure: callers pass the file text and the environment; main.ts reads the file.

import { parse as parseYaml } from 'yaml';
import type { KubernetesSourceConfig } from '../endpoints/kubernetes-source.js';
import { errorMessage } from '../util/error-message.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface Config {
  readonly listen: {
    /** gRPC ext_proc + health: `host:port` or `unix:///path/to.sock`. */
    readonly grpc: string;
    /** HTTP /metrics, /healthz, /readyz, /debug/endpoints: `host:port`. */
    readonly http: string;
    /** TLS on the gRPC listener; absent = plaintext (sidecar, Unix socket). */
    readonly tls?: GrpcTlsConfig;
  };
  readonly logLevel: LogLevel;
  readonly source:
    | { readonly kind: 'static'; readonly path: string }
    | { readonly kind: 'kubernetes'; readonly kubernetes: KubernetesSourceConfig };
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
  };
  readonly quarantine: {
    readonly threshold: number;
    readonly baseMs: number;
    readonly maxMs: number;
    /** Checking a replica after a mid-stream break: GET this path (2xx = alive); empty = TCP connect only. */
    readonly checkPath: string;
    readonly checkTimeoutMs: number;
  };
  /** On SIGTERM: keep answering (health NOT_SERVING) this long, so the proxy moves away first. */
  readonly shutdownDrainMs: number;
  /** Then stop taking new streams; open ones get this long before they are released to Envoy. */
  readonly shutdownGraceMs: number;
}

export type DestinationFormat = 'list' | 'single';

/** Certificate and key files (PEM, reloaded when they change), or a self-signed pair made at start. */
export type GrpcTlsConfig =
  | { readonly mode: 'files'; readonly certFile: string; readonly keyFile: string }
  | { readonly mode: 'self-signed' };

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

type Raw = Record<string, unknown>;

function section(raw: Raw, key: string): Raw {
  const value = raw[key];
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new ConfigError(`${key}: expected a mapping`);
  return value as Raw;
}

function str(raw: Raw, key: string, where: string, fallback?: string): string {
  const value = raw[key];
  if (value === undefined || value === null) {
    if (fallback !== undefined) return fallback;
    throw new ConfigError(`${where}${key}: required`);
  }
  if (typeof value !== 'string' || value === '') throw new ConfigError(`${where}${key}: expected a non-empty string`);
  return value;
}

function num(raw: Raw, key: string, where: string, fallback: number, min: number): number {
  const value = raw[key];
  if (value === undefined || value === null) return fallback;
  const n = typeof value === 'string' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < min) throw new ConfigError(`${where}${key}: expected a number ≥ ${min}, got ${typeof value === 'number' ? String(value) : JSON.stringify(value)}`);
  return n;
}

function whole(raw: Raw, key: string, where: string, fallback: number, min: number): number {
  const value = num(raw, key, where, fallback, min);
  if (!Number.isInteger(value)) throw new ConfigError(`${where}${key}: expected a whole number, got ${value}`);
  return value;
}

function port(raw: Raw, key: string, where: string): number {
  const value = num(raw, key, where, 8000, 1);
  if (!Number.isInteger(value) || value > 65535) throw new ConfigError(`${where}${key}: expected a port number 1–65535, got ${JSON.stringify(raw[key])}`);
  return value;
}

function stringList(value: unknown, where: string): string[] {
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string' || v === '')) throw new ConfigError(`${where}: expected a list of non-empty strings`);
  return value as string[];
}

function kubernetesSection(raw: Raw): KubernetesSourceConfig {
  const where = 'kubernetes.';
  rejectUnknownKeys(raw, ['kubeconfigPath', 'pools', 'inferencePools', 'backoff', 'timeouts'], where);
  const poolsRaw = raw.pools ?? [];
  if (!Array.isArray(poolsRaw)) throw new ConfigError(`${where}pools: expected a list`);
  const pools = poolsRaw.map((p: unknown, i) => {
    if (typeof p !== 'object' || p === null) throw new ConfigError(`${where}pools[${i}]: expected a mapping`);
    const pool = p as Raw;
    const at = `${where}pools[${i}].`;
    rejectUnknownKeys(pool, ['name', 'namespace', 'selector', 'targetPort', 'models'], at);
    const selector = section(pool, 'selector');
    if (Object.keys(selector).length === 0) throw new ConfigError(`${at}selector: required (label key: value pairs)`);
    for (const [k, v] of Object.entries(selector)) if (typeof v !== 'string') throw new ConfigError(`${at}selector.${k}: expected a string`);
    return {
      name: str(pool, 'name', at),
      namespace: str(pool, 'namespace', at),
      selector: selector as Record<string, string>,
      targetPort: port(pool, 'targetPort', at),
      models: stringList(pool.models, `${at}models`),
    };
  });
  const inference = section(raw, 'inferencePools');
  rejectUnknownKeys(inference, ['enabled', 'namespaces', 'modelsAnnotation'], `${where}inferencePools.`);
  const config: KubernetesSourceConfig = { pools };
  if (typeof raw.kubeconfigPath === 'string') config.kubeconfigPath = raw.kubeconfigPath;
  if (inference.enabled === true) {
    config.inferencePools = { enabled: true, namespaces: stringList(inference.namespaces ?? [], `${where}inferencePools.namespaces`) };
    if (typeof inference.modelsAnnotation === 'string') config.inferencePools.modelsAnnotation = inference.modelsAnnotation;
  }
  if (pools.length === 0 && config.inferencePools === undefined) throw new ConfigError(`${where}pools: define at least one pool, or enable inferencePools`);
  if (raw.backoff !== undefined && raw.backoff !== null) {
    const at = `${where}backoff.`;
    if (typeof raw.backoff !== 'object' || Array.isArray(raw.backoff)) throw new ConfigError(`${where}backoff: expected a mapping`);
    const backoff = raw.backoff as Raw;
    rejectUnknownKeys(backoff, ['initialMs', 'maxMs'], at);
    if (backoff.initialMs === undefined || backoff.maxMs === undefined) throw new ConfigError(`${where}backoff: needs both initialMs and maxMs`);
    const initialMs = num(backoff, 'initialMs', at, 0, 1);
    const maxMs = num(backoff, 'maxMs', at, 0, 1);
    if (maxMs < initialMs) throw new ConfigError(`${at}maxMs: must be ≥ initialMs (${initialMs})`);
    config.backoff = { initialMs, maxMs };
  }
  if (raw.timeouts !== undefined && raw.timeouts !== null) {
    const at = `${where}timeouts.`;
    if (typeof raw.timeouts !== 'object' || Array.isArray(raw.timeouts)) throw new ConfigError(`${where}timeouts: expected a mapping`);
    const timeouts = raw.timeouts as Raw;
    rejectUnknownKeys(timeouts, ['listSeconds', 'watchSeconds'], at);
    config.timeouts = {};
    // At least one second each: client-node and the API server both take whole seconds.
    if (timeouts.listSeconds !== undefined) config.timeouts.listSeconds = num(timeouts, 'listSeconds', at, 0, 1);
    if (timeouts.watchSeconds !== undefined) config.timeouts.watchSeconds = num(timeouts, 'watchSeconds', at, 0, 1);
  }
  return config;
}

/**
 * Builds the configuration. `fileText` is the YAML config file's content (or undefined), `env`
 * the process environment. Environment variables override the file:
 * LLM_EXTPROC_GRPC_ADDRESS, LLM_EXTPROC_HTTP_ADDRESS, LLM_EXTPROC_LOG_LEVEL, LLM_EXTPROC_ENDPOINTS_FILE.
 */
export function buildConfig(fileText: string | undefined, env: Readonly<Record<string, string | undefined>>): Config {
  let raw: Raw = {};
  if (fileText !== undefined) {
    let parsed: unknown;
    try {
      parsed = parseYaml(fileText);
    } catch (err) {
      throw new ConfigError(`config file is not valid YAML: ${errorMessage(err)}`);
    }
    if (parsed !== null && parsed !== undefined) {
      if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError('config file: expected a mapping at the top level');
      raw = parsed as Raw;
    }
  }
  rejectUnknownKeys(raw, TOP_LEVEL_KEYS, '');
  const listen = section(raw, 'listen');
  const routing = section(raw, 'routing');
  const quarantine = section(raw, 'quarantine');
  rejectUnknownKeys(listen, ['grpc', 'http', 'tls'], 'listen.');
  rejectUnknownKeys(routing, ['fallbacks', 'maxRequestBodyBytes', 'maxInspectedBodyBytes', 'pool', 'destinationFormat'], 'routing.');
  rejectUnknownKeys(quarantine, ['consecutiveFailures', 'baseSeconds', 'maxSeconds', 'checkPath', 'checkTimeoutSeconds'], 'quarantine.');
  const logLevel = readLogLevel(raw, env);

  const endpointsFile = nonEmpty(env.LLM_EXTPROC_ENDPOINTS_FILE);
  let source: Config['source'];
  if (endpointsFile !== undefined && endpointsFile !== '') source = { kind: 'static', path: endpointsFile };
  else if (raw.kubernetes !== undefined) source = { kind: 'kubernetes', kubernetes: kubernetesSection(section(raw, 'kubernetes')) };
  else {
    const staticSection = section(raw, 'static');
    rejectUnknownKeys(staticSection, ['path'], 'static.');
    source = { kind: 'static', path: str(staticSection, 'path', 'static.', 'endpoints.yaml') };
  }

  const config: Config = {
    listen: {
      grpc: nonEmpty(env.LLM_EXTPROC_GRPC_ADDRESS) ?? str(listen, 'grpc', 'listen.', '0.0.0.0:9002'),
      http: nonEmpty(env.LLM_EXTPROC_HTTP_ADDRESS) ?? str(listen, 'http', 'listen.', '0.0.0.0:9090'),
      ...tlsSection(section(listen, 'tls')),
    },
    logLevel,
    source,
    routing: {
      fallbacks: whole(routing, 'fallbacks', 'routing.', 2, 0),
      maxRequestBodyBytes: num(routing, 'maxRequestBodyBytes', 'routing.', 8 * 1024 * 1024, 1),
      maxInspectedBodyBytes: num(routing, 'maxInspectedBodyBytes', 'routing.', 4 * 1024 * 1024, 0),
      ...(routing.pool === undefined || routing.pool === null ? {} : { pool: str(routing, 'pool', 'routing.') }),
      destinationFormat: destinationFormat(routing),
    },
    quarantine: {
      threshold: whole(quarantine, 'consecutiveFailures', 'quarantine.', 3, 1),
      baseMs: num(quarantine, 'baseSeconds', 'quarantine.', 10, 0) * 1000,
      maxMs: num(quarantine, 'maxSeconds', 'quarantine.', 300, 0) * 1000,
      checkPath: checkPath(quarantine),
      checkTimeoutMs: num(quarantine, 'checkTimeoutSeconds', 'quarantine.', 0.5, 0.001) * 1000,
    },
    shutdownDrainMs: num(raw, 'shutdownDrainSeconds', '', 5, 0) * 1000,
    shutdownGraceMs: num(raw, 'shutdownGraceSeconds', '', 20, 0) * 1000,
  };
  if (config.quarantine.maxMs < config.quarantine.baseMs) throw new ConfigError('quarantine.maxSeconds: must be ≥ quarantine.baseSeconds');
  return deepFreeze(config);
}

/** `quarantine.checkPath`: absent or empty = TCP connect only; otherwise an absolute HTTP path. */
function checkPath(quarantine: Raw): string {
  const value = quarantine.checkPath;
  if (value === undefined || value === null || value === '') return '';
  if (typeof value !== 'string' || !value.startsWith('/')) throw new ConfigError(`quarantine.checkPath: expected a path starting with "/", got ${JSON.stringify(value)}`);
  return value;
}

/** `listen.tls`: `enabled` with both files, or with neither (self-signed at start). */
function tlsSection(tls: Raw): { tls?: GrpcTlsConfig } {
  rejectUnknownKeys(tls, ['enabled', 'certFile', 'keyFile'], 'listen.tls.');
  if (tls.enabled === undefined || tls.enabled === null || tls.enabled === false) {
    if (tls.certFile !== undefined || tls.keyFile !== undefined) throw new ConfigError('listen.tls.enabled: set it to true to use certFile/keyFile');
    return {};
  }
  if (tls.enabled !== true) throw new ConfigError(`listen.tls.enabled: expected true or false, got ${JSON.stringify(tls.enabled)}`);
  const hasCert = tls.certFile !== undefined && tls.certFile !== null;
  const hasKey = tls.keyFile !== undefined && tls.keyFile !== null;
  if (hasCert !== hasKey) throw new ConfigError('listen.tls: give both certFile and keyFile, or neither for a self-signed certificate');
  if (!hasCert) return { tls: { mode: 'self-signed' } };
  return { tls: { mode: 'files', certFile: str(tls, 'certFile', 'listen.tls.'), keyFile: str(tls, 'keyFile', 'listen.tls.') } };
}

function destinationFormat(routing: Raw): DestinationFormat {
  const value = routing.destinationFormat ?? 'list';
  if (value !== 'list' && value !== 'single') throw new ConfigError(`routing.destinationFormat: expected list or single, got ${JSON.stringify(value)}`);
  return value;
}

const TOP_LEVEL_KEYS = ['listen', 'logLevel', 'static', 'kubernetes', 'routing', 'quarantine', 'shutdownDrainSeconds', 'shutdownGraceSeconds'];

/** A misspelt key would silently fall back to a default: refuse it instead. */
function rejectUnknownKeys(raw: Raw, known: readonly string[], where: string): void {
  for (const key of Object.keys(raw)) {
    if (!known.includes(key)) throw new ConfigError(`${where}${key}: unknown setting (expected one of ${known.join(', ')})`);
  }
}

/** An empty environment variable means "not set" (Kubernetes renders unset values as ""). */
function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

function readLogLevel(raw: Raw, env: Readonly<Record<string, string | undefined>>): LogLevel {
  const fromEnv = nonEmpty(env.LLM_EXTPROC_LOG_LEVEL);
  if (fromEnv !== undefined) {
    if (!(LOG_LEVELS as readonly string[]).includes(fromEnv)) throw new ConfigError(`LLM_EXTPROC_LOG_LEVEL: expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(fromEnv)}`);
    return fromEnv as LogLevel;
  }
  const value = raw.logLevel ?? 'info';
  if (typeof value !== 'string' || !(LOG_LEVELS as readonly string[]).includes(value)) {
    throw new ConfigError(`logLevel: expected one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as LogLevel;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}
