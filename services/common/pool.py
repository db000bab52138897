"""The handler threads of a service's gRPC server: started on demand, given back when idle.

grpc's sync server runs every call on a thread of its executor, and a server-streaming call
(a watch) holds its thread for as long as the stream is open. ``concurrent.futures``'
ThreadPoolExecutor never lets a thread go: after 1,000 watches closed, 1,000 idle threads stayed.
:class:`ElasticThreadPool` starts a thread when no idle one is waiting (up to ``max_workers``;
beyond it work queues, as before) and ends a thread that found no work for ``idle_s`` seconds,
so a server returns to its baseline once its streams end.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

#: Seconds an idle handler thread waits for work before it ends.
DEFAULT_IDLE_S = 5.0


class ElasticThreadPool(futures.Executor):
    """An executor whose threads come and go with the load (module doc)."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "rpc", idle_s: float = DEFAULT_IDLE_S) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.max_workers = max_workers
        self.idle_s = idle_s
        self._prefix = thread_name_prefix
        self._queue: queue.SimpleQueue[tuple[futures.Future[Any], Callable[..., Any], tuple, dict] | None] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for work
        self._queued = 0  # work not yet taken by a thread
        self._started = 0
        self._shutdown = False
        self._alive: set[threading.Thread] = set()

    @property
    def threads(self) -> int:
        """Handler threads alive now."""
        with self._lock:
            return self._threads

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.put((future, fn, args, kwargs))
            self._queued += 1
            if self._queued > self._idle and self._threads < self.max_workers:
                self._threads += 1
                self._idle += 1  # counted idle from birth, so the next submit does not start another for this work
                self._started += 1
                thread = threading.Thread(target=self._work, name=f"{self._prefix}_{self._started}", daemon=True)
                self._alive.add(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._queued > 0 and not self._shutdown:
                        continue  # work arrived as the wait ran out: take it
                    self._idle -= 1
                    self._threads -= 1
                    self._alive.discard(threading.current_thread())
                    return
            with self._lock:
                self._idle -= 1
                if item is not None:
                    self._queued -= 1
            if item is None:  # shutdown
                with self._lock:
                    self._threads -= 1
                    self._alive.discard(threading.current_thread())
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - the future carries it, as ThreadPoolExecutor's do
                    future.set_exception(exc)
            del item, future, fn, args, kwargs  # drop references before idling (a stream's state, say)
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            threads = self._threads
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
                    with self._lock:
                        self._queued -= 1
        for _ in range(threads):
            self._queue.put(None)
        if wait:
            with self._lock:
                alive = list(self._alive)
            for thread in alive:
                if thread is not threading.current_thread():
                    thread.join()
