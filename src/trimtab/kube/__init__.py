"""trimtab as the scheduler of a Kubernetes cluster (`trimtab kube`): informers (list + watch) feed a snapshot
read with the one Kubernetes reader, the same Scheduler and Profile as simulation and serve decide, and the
decisions go back through the API (pods/binding, the Eviction API, PodScheduled conditions and Events).

Modules: api (the seam to the API server), wire (its light write path), events (best-effort Events), informer
(list + watch of one kind), snapshot (objects -> nodes and jobs), view (the cluster kept between cycles), live (the
scheduling loop), leader (leader election), metrics (the endpoints), twin (`simulate --from-cluster`). Needs the
`kube` extra (lightkube)."""
