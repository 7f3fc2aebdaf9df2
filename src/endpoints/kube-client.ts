// The parts of @kubernetes/client-node that the Kubernetes source runs, and nothing else: the
// kubeconfig (KubeConfig: in-cluster or file loading rules, credentials and exec plugins, TLS,
// proxies) and the watch. The package has no exports map, so its files can be imported one by one;
// its index would load every generated API and model (55–68 MiB of resident memory, most of it
// source text no picker runs). Lists are plain GETs with the kubeconfig's options (kube-list.ts).
//
// KubeConfig's own module still imports the generated index, for makeApiClient, which we never
// call. `npm run build` re-emits this module (scripts/narrow-kube-client.mjs) with that one import
// narrowed to the two small files KubeConfig uses, so `node dist/src/main.js` never loads the
// generated APIs either (test/e2e/lazy-loading.test.ts fails if it does).

export { KubeConfig } from '@kubernetes/client-node/dist/config.js';
export { Watch } from '@kubernetes/client-node/dist/watch.js';
