"""cairn.http.serve bounds the blocking work of concurrent requests to a few worker threads.

Searches embed the query on every core already; running more of them at once than there are
cores only makes each slower (bench_http: 67 → 48 ms of daemon CPU per /search, 6.5 → 10.7
searches/s with 8 clients on 2 cores). A real server on 127.0.0.1 and a real client; the query
service is a small stand-in that holds each call until the test has seen the pool full.
Nothing sleeps: waits are on a condition with a timeout.
"""

from __future__ import annotations

import asyncio
import os
import threading

import aiohttp

from cairn.http import default_workers, make_app, serve
from cairn.search import SearchResult
from support.http_client import AUTH, TOKEN
from support.stand_ins import EmptyQuery, stand_in_services
from support.waits import run

WAIT_S = 20


class HeldQuery(EmptyQuery):
    """Counts calls running at once; each call waits until ``release`` is set."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.running = 0
        self.most = 0
        self.threads: set[str] = set()
        self.release = threading.Event()

    def search(self, request, caller=None) -> SearchResult:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.threads.add(threading.current_thread().name)
            self.lock.notify_all()
        try:
            if not self.release.wait(WAIT_S):
                raise RuntimeError("the test never released the held searches")
            return SearchResult(hits=[], elapsed_ms=0.1)
        finally:
            with self.lock:
                self.running -= 1

    def ask(self, request, caller=None):
        raise AssertionError("not used")

    def wait_running(self, n: int) -> bool:
        with self.lock:
            return self.lock.wait_for(lambda: self.running >= n, WAIT_S)


def test_concurrent_searches_run_on_at_most_the_configured_worker_threads():
    query = HeldQuery()
    workers, clients = 2, 6

    async def scenario():
        app = make_app(stand_in_services(query), token=TOKEN)
        server = await serve(app, "127.0.0.1", 0, workers=workers)
        waiter = threading.Thread(target=lambda: (query.wait_running(workers), query.release.set()), daemon=True)
        try:
            async with aiohttp.ClientSession() as session:

                async def one(i: int) -> int:
                    async with session.get(server.url + "/search", params={"q": f"query {i}"}, headers=AUTH) as resp:
                        return resp.status

                waiter.start()  # releases the held searches once `workers` of them run at once
                return await asyncio.gather(*(one(i) for i in range(clients)))
        finally:
            query.release.set()
            await server.close()

    statuses = run(scenario())
    assert statuses == [200] * clients
    assert query.most == workers  # the pool filled up, and no further call ran alongside
    assert len(query.threads) <= workers and all(t.startswith("cairn-worker") for t in query.threads)


def test_the_default_pool_has_one_thread_per_core_and_at_least_two():
    assert default_workers() == max(2, os.cpu_count() or 1)
