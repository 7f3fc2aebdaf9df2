// A kind served under llm-d's API group and under the Inference Extension's group it replaced
// (InferenceObjective, InferenceModelRewrite), watched in each namespace under both, read as one.
//
// llm-d's rule (llm-d-router pkg/epp/server/controller_config.go): when the llm-d.ai kind is
// installed, the legacy group's objects are ignored, even where both exist; the legacy group is
// read only on a cluster without the new one. "Installed" here is "its list succeeded", which is
// what discovery tells llm-d, and "not installed" is "its list was refused" (404/403): until one of
// the two is known, neither group's objects apply. Both installed is said once in the log, as llm-d does.

import type { Logger } from 'pino';
import type { WatchedObject } from './pod-pools.js';
import type { Collection, LoopDeps } from './list-watch.js';
import { ListWatchLoop } from './list-watch.js';

export interface ApiKind {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
}

export class AliasedKind {
  private readonly current: Array<ListWatchLoop<WatchedObject>> = [];
  private readonly legacy: Array<ListWatchLoop<WatchedObject>> = [];
  private saidBoth = false;

  constructor(
    private readonly kinds: { readonly current: ApiKind; readonly legacy: ApiKind },
    /** The kind's name as users write it, for the log line. */
    private readonly kindName: string,
    private readonly log: Logger,
  ) {}

  /** Starts both groups' loops for one namespace; `collection` makes one group's (optional: the CRD may be absent). */
  watch(collection: (kind: ApiKind, legacy: boolean) => Collection<WatchedObject>, deps: LoopDeps, onChange: () => void): void {
    const current = new ListWatchLoop(collection(this.kinds.current, false), deps, onChange);
    const legacy = new ListWatchLoop(collection(this.kinds.legacy, true), deps, onChange);
    this.current.push(current);
    this.legacy.push(legacy);
    current.start();
    legacy.start();
  }

  get watching(): boolean {
    return this.current.length > 0;
  }

  loops(): Array<ListWatchLoop<WatchedObject>> {
    return [...this.current, ...this.legacy];
  }

  /** The objects that apply: llm-d.ai's when that kind is installed, else the legacy group's. */
  items(): WatchedObject[] {
    const currentServed = this.current.some((l) => l.synced);
    if (currentServed && !this.saidBoth && this.legacy.some((l) => l.synced)) {
      this.saidBoth = true;
      const { current, legacy } = this.kinds;
      this.log.warn(
        `${this.kindName} is installed under both ${legacy.group} (deprecated) and ${current.group}: following llm-d, the ${current.group} objects apply and the ${legacy.group} ones are ignored`,
      );
    }
    // Until the API server has answered for llm-d.ai's kind, the legacy group's objects are held
    // back: applying them and then dropping them when llm-d.ai lists would order requests, for a
    // moment, by objects llm-d ignores (it asks discovery before it starts watching).
    if (!currentServed && !this.current.every((l) => l.answered)) return [];
    const from = currentServed ? this.current : this.legacy;
    return from.flatMap((l) => [...l.items()]);
  }
}
