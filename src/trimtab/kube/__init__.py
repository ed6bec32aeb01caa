"""trimtab as the scheduler of a Kubernetes cluster (`trimtab kube`): informers (list + watch) feed a snapshot
read with the one Kubernetes reader, the same Scheduler and Profile as simulation and serve decide, and the
decisions go back through the API (pods/binding, the Eviction API, PodScheduled conditions and Events).

Modules: api (the lightkube seam), informer (list + watch of one kind), snapshot (objects -> nodes and jobs),
live (the scheduling loop). Needs the `kube` extra (lightkube)."""
