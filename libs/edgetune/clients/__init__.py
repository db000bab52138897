"""Typed gRPC clients, records in and records out: :mod:`.coordinator` (jobs, rounds, configs, the
operator's side), :mod:`.nodes` (an agent's register / heartbeat / config watch), :mod:`.profiler`,
:mod:`.estimator`, :mod:`.optimizer`, and :mod:`.tuning` (the tuning protocols' remote adapters over
them). Every client reports a failed call the same way, :class:`.calls.CallFailed` with the server's
status code (:mod:`.calls` says why), and returns a server stream as a :class:`.calls.Stream`."""
