// InferencePools (inference.networking.k8s.io/v1) as pool definitions: the selector, target port
// and the served models from our annotation. Pure parsing of what the list-watch loop hands over.

import type { PoolDefinition, WatchedObject } from './pod-pools.js';
import { field } from './list-watch.js';

export const DEFAULT_MODELS_ANNOTATION = 'llm-extproc.io/models';

export const INFERENCE_POOL = { group: 'inference.networking.k8s.io', version: 'v1', plural: 'inferencepools' } as const;

/** Turns an InferencePool (v1) into a pool definition, or says why it cannot. */
export function parseInferencePool(object: WatchedObject, modelsAnnotation: string): PoolDefinition | string {
  const name = object.metadata?.name;
  const namespace = object.metadata?.namespace;
  if (name === undefined || namespace === undefined) return 'InferencePool without name or namespace';
  const id = `${namespace}/${name}`;
  const spec = field(object, 'spec');
  const matchLabels = field(field(spec, 'selector'), 'matchLabels');
  if (!isStringRecord(matchLabels) || Object.keys(matchLabels).length === 0) {
    return `InferencePool ${id} has no spec.selector.matchLabels; ignoring it`;
  }
  const ports = field(spec, 'targetPorts');
  const port = Array.isArray(ports) ? field(ports[0] as unknown, 'number') : undefined;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return `InferencePool ${id} has no valid spec.targetPorts[0].number; ignoring it`;
  }
  return { name: id, namespace, selector: matchLabels, targetPort: port, models: annotatedModels(object, modelsAnnotation) };
}

/** The models an object names in the models annotation (comma-separated; blanks dropped): InferencePools and InferenceObjectives alike. */
export function annotatedModels(object: WatchedObject, modelsAnnotation: string): string[] {
  return (object.metadata?.annotations?.[modelsAnnotation] ?? '')
    .split(',')
    .map((m) => m.trim())
    .filter((m) => m !== '');
}

function isStringRecord(value: unknown): value is Record<string, string> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && Object.values(value).every((v) => typeof v === 'string');
}
