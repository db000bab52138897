"""Coordination of a cluster of Jetsons, all state in the Store.

- ``store``     the Store protocol and typed records; backends: in-memory (unit tests),
                embedded redis-server (the default on one machine), Redis by URL (a cluster).
                The only package that talks to Redis.
- ``registry``  nodes, heartbeats with TTL (lost nodes are planned around), budgets
- ``jobs``      per-node profiling job queues (at-least-once, re-delivery, dead letters)
- ``leader``    a lease in the store so one coordinator replica plans at a time
- ``configs``   per-node configs with revisions, pushed to watchers
- ``kube``      Kubernetes node awareness (label selector, cordoned / NotReady nodes)
- ``planning``  federated-round planning (makespan, energy, site budget)
- ``rounds``    PlanRound / re-plan glue between registry, store, planner and configs
- ``inference`` re-solve an inference node's mode and batch size when its arrival rate moves
- ``processes`` services as child processes: start, wait for health, logs, guaranteed stop
- ``localcluster`` Redis, coordinator, agents and services as local processes (tests, examples)
"""
