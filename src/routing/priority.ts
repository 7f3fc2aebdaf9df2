// A request's flow-control priority from the config and the InferenceObjectives of its pool. Pure.
//
// Precedence, first match wins: what the request itself names comes before what its model implies,
// and at each of those two levels the operator's config comes before the cluster's objectives
// (config is the gateway owner's deliberate override; objectives are edited by workload owners):
//   1. picker.flowControl.priorityByHeaderValue[the priority header's value]
//   2. the InferenceObjective the x-gateway-inference-objective header names (in the request's pool)
//   3. picker.flowControl.priorityByModel[model]
//   4. the InferenceObjective of the pool whose models annotation names the model
//   5. picker.flowControl.defaultPriority
// An objective without spec.priority sets nothing: the next rule decides.

import type { ObjectiveIndex } from '../endpoints/inference-objectives.js';
import type { FlowControlSettings } from '../picker/settings.js';

export interface PriorityFacts {
  /** The pool the request queues in. */
  readonly pool: string;
  readonly model: string;
  /** The priority header's value. */
  readonly priorityClass: string | undefined;
  /** The objective header's value (an InferenceObjective's name). */
  readonly objective: string | undefined;
}

type PrioritySettings = Pick<FlowControlSettings, 'defaultPriority' | 'priorityByModel' | 'priorityByHeaderValue' | 'objectiveHeader'>;

export function requestPriority(settings: PrioritySettings, objectives: ObjectiveIndex, facts: PriorityFacts): number {
  const { priorityClass, objective, model } = facts;
  if (priorityClass !== undefined && Object.hasOwn(settings.priorityByHeaderValue, priorityClass)) {
    return settings.priorityByHeaderValue[priorityClass];
  }
  const ofPool = objectives.get(facts.pool);
  // An empty objectiveHeader turns name matching off: the header is the client's to set unless the gateway strips it.
  const named = objective === undefined || settings.objectiveHeader === '' ? undefined : ofPool?.byName.get(objective);
  if (named !== undefined) return named;
  if (Object.hasOwn(settings.priorityByModel, model)) return settings.priorityByModel[model];
  return ofPool?.byModel.get(model) ?? settings.defaultPriority;
}
