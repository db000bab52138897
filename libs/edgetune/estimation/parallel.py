"""Run many independent estimation tasks in parallel with Ray, or one after another.

Every piece of estimation work that fans out — proxy trainings per (batch size, seed),
predictor fits per (workload, target), cross-validation folds — goes through
:func:`run_tasks`:

- ``parallel=True`` and no address: a **local Ray** started lazily on first use with quiet
  defaults (no dashboard, no worker logs on the driver, ``num_cpus`` = ``os.cpu_count()``
  unless given); a Ray already initialised by the caller is used as it is;
- an ``address`` argument or the ``EDGETUNE_RAY_ADDRESS`` environment variable: that **Ray
  cluster** (``"auto"``, ``"ray://head:10001"``, ...);
- ``parallel=False``: the same calls, in order, in this process (no Ray import at all);
- ``processes=N`` (with ``parallel=False``): a pool of N worker processes on this machine
  (spawned, started once by :func:`ensure_pool`; no Ray), each task on one of them.

Either way each task runs with one torch thread and one BLAS thread, so N tasks on N cores
do not oversubscribe them and a seeded task gives bit-identical results in both modes
(torch's CPU kernels can reduce in a different order with another thread count). Results
come back in input order. A failing task raises :class:`TaskFailed` naming the function and
the task's arguments, chained to the original exception; the other tasks are cancelled.
``progress(done, total)`` is called as tasks finish (in completion order under Ray).

``shared`` kwargs (a dataset, a pre-trained checkpoint) are put into Ray's object store
once and handed to every task, instead of being serialised once per task.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
import os
import pickle
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from edgetune import stopping
from edgetune.errors import EdgetuneError, InvalidArgument
from edgetune.estimation.threads import single_threaded

ADDRESS_ENV = "EDGETUNE_RAY_ADDRESS"

Progress = Callable[[int, int], None]

_lock = threading.Lock()
_started_here = False  # whether this module called ray.init (then ``shutdown`` may stop it)


class TaskFailed(EdgetuneError, RuntimeError):
    """One task of :func:`run_tasks` raised; ``kwargs`` are its arguments, ``cause`` the original error."""

    def __init__(self, fn_name: str, index: int, kwargs: Mapping[str, Any], cause: BaseException) -> None:
        self.fn_name, self.index, self.kwargs, self.cause = fn_name, index, dict(kwargs), cause
        args = ", ".join(f"{k}={_short_repr(v)}" for k, v in kwargs.items())
        super().__init__(f"task {index} {fn_name}({args}) failed: {type(cause).__name__}: {cause}")


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """What every task runs, local or remote: ``fn(**kwargs)`` on one thread."""
    with single_threaded():
        return fn(**kwargs)


def _remote_call(fn: Callable[..., Any], kwargs: dict[str, Any], shared_names: list[str],
                 *shared_values: Any) -> Any:
    try:
        return _call(fn, {**dict(zip(shared_names, shared_values, strict=True)), **kwargs})
    except Exception as exc:  # noqa: BLE001 - shipped back as data, re-raised by the driver
        return _Failure.of(exc)


class _Failure:
    """A task's exception in a form that survives pickling back to the driver.

    Ray re-creates a remote exception by calling its class with ``exc.args``; exceptions whose
    ``__init__`` takes other arguments (``InvalidArgument(field, message, allowed)``) come
    back as an opaque ``UnserializableException``. Rebuilding with ``__new__`` + ``args`` +
    ``__dict__`` keeps the original type and fields.
    """

    def __init__(self, exc_cls: type[BaseException] | None, args: tuple[Any, ...], state: dict[str, Any], text: str,
                 trace: str) -> None:
        self.exc_cls, self.args, self.state, self.text, self.trace = exc_cls, args, state, text, trace

    @classmethod
    def of(cls, exc: BaseException) -> _Failure:
        exc_cls: type[BaseException] | None = type(exc)
        args: tuple[Any, ...] = exc.args
        state: dict[str, Any] = dict(getattr(exc, "__dict__", {}))
        try:
            pickle.loads(pickle.dumps((exc_cls, args, state)))
        except Exception:  # noqa: BLE001 - a class or field that cannot travel: keep the text
            exc_cls, args, state = None, (), {}
        return cls(exc_cls, args, state, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)))

    def rebuild(self) -> BaseException:
        exc: BaseException
        try:
            assert self.exc_cls is not None
            exc = self.exc_cls.__new__(self.exc_cls)
            exc.args = self.args
            exc.__dict__.update(self.state)
        except Exception:  # noqa: BLE001
            exc = RuntimeError(self.text)
        exc.add_note(f"in the Ray task:\n{self.trace}")
        return exc


def resolve_address(address: str | None = None) -> str | None:
    """The Ray cluster to use: ``address``, else ``$EDGETUNE_RAY_ADDRESS``, else None (local Ray)."""
    return address or os.environ.get(ADDRESS_ENV) or None


#: Tries at starting a local Ray: its raylet has a fixed 30 s to register, which a loaded
#: two-core machine can miss; a second try almost always works.
LOCAL_START_ATTEMPTS = 3


def init_local_ray(attempts: int = LOCAL_START_ATTEMPTS, **init_kwargs: Any) -> Any:
    """``ray.init(**init_kwargs)`` for a local Ray, retried when the node times out starting."""
    import ray  # deferred: ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(**init_kwargs)
            return ray
        except Exception:  # noqa: BLE001 - Ray raises a bare Exception for a node that did not start
            ray.shutdown()
            if attempt == attempts:
                raise
            logging.getLogger(__name__).warning("local Ray did not start (attempt %d of %d); trying again",
                                                attempt, attempts)
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Initialise Ray once (cluster at ``address`` or a quiet local one); returns the ``ray`` module.

    A Ray the caller already initialised is left as it is (its ``num_cpus`` wins).
    """
    global _started_here
    import ray  # deferred: ray

    with _lock:
        if ray.is_initialized():
            return ray
        address = resolve_address(address)
        # CPU-only tasks: opt in to Ray's future GPU env behaviour, which also silences its FutureWarning
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            if num_cpus is not None and num_cpus < 1:
                raise InvalidArgument("num_cpus", f"{num_cpus} must be positive", ">= 1")
            init_local_ray(num_cpus=num_cpus or os.cpu_count() or 1, include_dashboard=False,
                           log_to_driver=False, logging_level=logging.WARNING)
        _started_here = True
    return ray


def shutdown() -> None:
    """Stop the Ray this module started (a Ray the caller started is theirs to stop)."""
    global _started_here
    with _lock:
        if _started_here:
            import ray  # deferred: ray

            ray.shutdown()
            _started_here = False


def grid(**axes: Sequence[Any]) -> list[dict[str, Any]]:
    """The cartesian product of ``axes`` as kwargs dicts, last axis fastest.

    ``grid(batch_size=[8, 32], seed=[0, 1])`` → ``[{batch_size: 8, seed: 0}, {8, 1}, {32, 0}, {32, 1}]``.
    """
    names = list(axes)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(axes[n] for n in names))]


_pool: Any = None
_pool_size = 0


def ensure_pool(processes: int) -> Any:
    """A pool of ``processes`` spawned workers, started once (spawned, not forked: this process may run gRPC
    threads); each worker imports the estimation modules as it starts, in the background (a server does not
    wait for them to listen), so the first task pays for none of it once they are up. A worker exits when
    this process is gone, however it went (:func:`_exit_with_parent`)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != processes:
            if _pool is not None:
                _pool.shutdown(cancel_futures=True)
            _pool = ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"),
                                        initializer=_warm_worker, initargs=(os.getpid(),))
            _pool_size = processes
            for _ in range(processes):  # the workers start (and import) now, in the background: not waited for
                _pool.submit(_ready)
    return _pool


#: How often a pool worker checks that the process that started it is still there.
PARENT_CHECK_S = 1.0


def _warm_worker(parent_pid: int) -> None:
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="exit-with-parent", daemon=True).start()
    import edgetune.estimation.bundle  # noqa: F401 - torch, sklearn and the predictors, once per worker


def _exit_with_parent(parent_pid: int) -> None:
    """End this pool worker once its parent is gone (its parent id changes when it is re-parented). A pool's
    workers wait on its queue forever otherwise: two of a SIGKILLed estimator's ran on at ~0.35 of a core each
    for 40 minutes. Not the parent-death signal: it fires when the *thread* that spawned the worker ends, and
    the pool may be started from a request's thread that retires long before the process does."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(1)


def _ready() -> bool:
    return True


def shutdown_pool() -> None:
    """Stop the pool :func:`ensure_pool` started, if any."""
    global _pool, _pool_size
    with _lock:
        if _pool is not None:
            _pool.shutdown(cancel_futures=True)
            _pool, _pool_size = None, 0


def run_tasks(
    fn: Callable[..., Any],
    list_of_kwargs: Sequence[Mapping[str, Any]],
    *,
    parallel: bool = True,
    address: str | None = None,
    num_cpus: int | None = None,
    progress: Progress | None = None,
    shared: Mapping[str, Any] | None = None,
    processes: int = 0,
    placements: list[str] | None = None,
) -> list[Any]:
    """``[fn(**shared, **kw) for kw in list_of_kwargs]``, as Ray tasks or in order (see module doc).

    ``fn`` must be importable by name in a Ray worker (defined in a module, not in a REPL
    cell or a test file outside ``sys.path``) or a closure cloudpickle can carry by value.
    ``placements``, when given, is filled with where each task ran (Ray: the node's id; a pool:
    host and worker process) under Ray and a pool.
    """
    tasks = [dict(kw) for kw in list_of_kwargs]
    common = dict(shared or {})
    for i, kw in enumerate(tasks):
        clash = set(kw) & set(common)
        if clash:
            raise InvalidArgument(f"list_of_kwargs[{i}]", f"repeats shared argument(s) {sorted(clash)}")
    name = getattr(fn, "__qualname__", repr(fn))
    if not tasks:
        return []
    if not parallel and processes > 0:
        return _run_pool(fn, name, tasks, common, progress, processes, placements)
    if not parallel:
        return _run_sequential(fn, name, tasks, common, progress)
    return _run_ray(fn, name, tasks, common, progress, address, num_cpus, placements)


def _placed_call(fn: Callable[..., Any], kwargs: dict[str, Any], shared_names: list[str],
                 *shared_values: Any) -> tuple[Any, str]:
    """:func:`_remote_call`, and where it ran (the Ray node's id, else this host and process)."""
    try:
        import ray

        where = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except ImportError:
        where = ""
    return _remote_call(fn, kwargs, shared_names, *shared_values), where or f"{os.uname().nodename}:{os.getpid()}"


def _succeeded(out: Any, name: str, index: int, task: Mapping[str, Any]) -> Any:
    """A task's result, or its failure (a worker's :class:`_Failure`) raised as :class:`TaskFailed`."""
    if isinstance(out, _Failure):
        cause = out.rebuild()
        raise TaskFailed(name, index, task, cause) from cause
    return out


def _run_pool(fn, name, tasks, common, progress, processes, placements) -> list[Any]:
    pool = ensure_pool(processes)
    names = list(common)
    futures = {pool.submit(_placed_call, fn, kw, names, *(common[k] for k in names)): i for i, kw in enumerate(tasks)}
    results: list[Any] = [None] * len(tasks)
    where: list[str] = [""] * len(tasks)
    done = 0
    try:
        pending = set(futures)
        while pending:
            ready, pending = cf.wait(pending, timeout=RAY_POLL_S, return_when=cf.FIRST_COMPLETED)
            stopping.check()
            for f in ready:
                i = futures[f]
                out, where[i] = f.result()
                results[i] = _succeeded(out, name, i, tasks[i])
                done += 1
                if progress is not None:
                    progress(done, len(tasks))
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    if placements is not None:
        placements[:] = where
    return results


def _run_sequential(fn, name, tasks, common, progress) -> list[Any]:
    results = []
    for i, kw in enumerate(tasks):
        try:
            results.append(_call(fn, {**common, **kw}))
        except Exception as exc:  # noqa: BLE001 - re-raised with the task named
            raise TaskFailed(name, i, kw, exc) from exc
        if progress is not None:
            progress(i + 1, len(tasks))
    return results


#: How often a Ray job checks whether its caller went away (seconds).
RAY_POLL_S = 0.25


def _run_ray(fn, name, tasks, common, progress, address, num_cpus, placements=None) -> list[Any]:
    ray = ensure_ray(address, num_cpus)
    from ray.exceptions import RayError  # deferred: ray

    # spread: a job's tasks go to every node of a cluster, not packed onto the first one with free CPUs
    remote = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(_placed_call)
    fn_ref = ray.put(fn)
    names = list(common)
    shared_refs = [ray.put(common[k]) for k in names]  # one copy in the object store
    pending = {}
    for i, kw in enumerate(tasks):
        # top-level ObjectRef arguments are resolved by Ray before the call; nested ones are not
        pending[remote.remote(fn_ref, kw, names, *shared_refs)] = i
    results: list[Any] = [None] * len(tasks)
    where: list[str] = [""] * len(tasks)
    done = 0
    try:
        while pending:
            # a short wait so that a caller who went away (edgetune.stopping: RPC cancelled, deadline
            # passed, server stopping) stops the job: the tasks still pending are cancelled below
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=RAY_POLL_S)
            stopping.check()
            for ref in ready:
                i = pending.pop(ref)
                try:
                    out, where[i] = ray.get(ref)
                except RayError as exc:  # the worker died, or the task was cancelled
                    raise TaskFailed(name, i, tasks[i], exc) from exc
                results[i] = _succeeded(out, name, i, tasks[i])
                done += 1
                if progress is not None:
                    progress(done, len(tasks))
    except BaseException as exc:
        # don't leave the rest running after a failure, Ctrl-C or a caller gone; a stopped job's
        # workers are killed (an interrupt can land in a worker's imports and leave it broken)
        for ref in pending:
            ray.cancel(ref, force=isinstance(exc, stopping.Stopped))
        raise
    if placements is not None:
        placements[:] = where
    return results
