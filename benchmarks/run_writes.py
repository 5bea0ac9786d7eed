"""What 300 concurrent tool-calling runs in one process write to the store, per step and per second (issue 33 build 4).

    python benchmarks/run_writes.py                        # 300 runs of 20 steps on PostgreSQL and Redis
    python benchmarks/run_writes.py --runs 50 --steps 10 --stores postgres

Each run calls a tool at every step (the tool takes ``--tool-ms``, the model ``--model-ms``)
and answers at its last. The store object is wrapped in a counter of its write calls:
``claim``, ``save_run`` (the saves, and the release) and ``renew``, the heartbeat's apart
from any a run made itself before a tool call. On PostgreSQL the rows inserted into and
deleted from the message table are read from ``pg_stat_user_tables`` after the pool is
closed (its backends then flush their counters); on Redis the messages each save sent are
counted at the store's script call. Printed per step and per second, side by side, with
the renewals apart, and the load average beside them.

A save costs what is new when each step inserts about one message row per save (the
tool call and its result arrive in one step: two messages) and deletes none, whatever the
number of runs; renewals are one call per ``lease / 3`` per process, whatever the number
of runs and of tool calls.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import agentsessions as agent
from agentsessions.endpoints import ScriptedEndpoint
from agentsessions.runs import Claim, Progress, Renewal

POSTGRES_DSN = os.environ.get("AGENTSESSIONS_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
REDIS_URL = os.environ.get("AGENTSESSIONS_TEST_REDIS", "redis://127.0.0.1:6379/0")


class Counting:
    """A store proxy that counts the write calls the runs make."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def _count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.calls[name] += n

    def claim(self, session_id: str, *, replica: str, lease: float) -> Claim:
        self._count("claim")
        claim: Claim = self.store.claim(session_id, replica=replica, lease=lease)
        return claim

    def save_run(self, claim: Claim, messages: Sequence[agent.Message], **kwargs: Any) -> Progress:
        self._count("save_run (release)" if kwargs.get("end") is not None else "save_run")
        progress: Progress = self.store.save_run(claim, messages, **kwargs)
        return progress

    def renew(self, claims: Sequence[Claim]) -> Renewal:
        by_heartbeat = threading.current_thread().name == "agentsessions-heartbeat"
        self._count("renew (heartbeat)" if by_heartbeat else "renew (by a run)")
        self._count("claims renewed", len(claims))
        renewal: Renewal = self.store.renew(claims)
        return renewal

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def run_all(store: Any, runs: int, steps: int, lease: float, tool_ms: float, model_ms: float) -> tuple[float, int]:
    """Run ``runs`` runs of ``steps`` tool-calling steps at once; the seconds taken and the steps run."""

    @agent.tool
    def work(n: int) -> str:
        """Do a step's work."""
        time.sleep(tool_ms / 1000)
        return f"done {n}"

    def reply(request: agent.ModelRequest) -> agent.Message:
        time.sleep(model_ms / 1000)
        step = (len(request.messages) + 1) // 2
        if step >= steps:
            return agent.Message.assistant("finished")
        call = agent.Content.tool_use(f"call-{step}", "work", f'{{"n": {step}}}')
        return agent.Message(agent.Role.ASSISTANT, [agent.Content.of_text(f"step {step}"), call])

    tag = f"writes-{secrets.token_hex(4)}"
    started = time.perf_counter()
    handles = [
        agent.Runner(replica="bench").start(
            agent.Spec(tools=[work], session=agent.open(f"{tag}-{i}", store), lease=lease, max_steps=steps + 1),
            [agent.Message.user(f"run {i}")],
            ScriptedEndpoint([reply] * (steps + 1)),
        )
        for i in range(runs)
    ]
    done = 0
    for handle in handles:
        try:
            done += handle.wait(600).steps
        except agent.RunError as error:  # reported, not hidden
            print(f"  a run failed: {error.__cause__!r:.200}")
    return time.perf_counter() - started, done


@contextlib.contextmanager
def postgres_store() -> Iterator[tuple[Any, Any]]:
    """A PostgreSQL store in a scratch schema, and how to read its message rows' counters after closing it."""
    import psycopg
    from psycopg_pool import ConnectionPool

    from agentsessions.stores import postgres

    schema = f"agentsessions_bench_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            options = {"options": f"-c search_path={schema}"}
            pool = ConnectionPool(POSTGRES_DSN, kwargs=options, min_size=4, max_size=16, open=True)
            with pool.connection() as conn:
                conn.execute(postgres.SCHEMA)

            def rows() -> tuple[int, int]:
                pool.close()  # each backend flushes its table counters as it ends
                query = "SELECT n_tup_ins, n_tup_del FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s"
                last, deadline = None, time.monotonic() + 15
                while time.monotonic() < deadline:
                    admin.execute("SELECT pg_stat_clear_snapshot()")
                    row = admin.execute(query, (schema, "agentsessions_messages")).fetchone()
                    if row is not None and row == last:
                        break
                    last = row
                    time.sleep(1)
                return (int(last[0]), int(last[1])) if last else (0, 0)

            yield postgres.PostgresStore(pool), rows
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@contextlib.contextmanager
def redis_store() -> Iterator[tuple[Any, Any]]:
    """A Redis store under a scratch prefix (its keys deleted at the end), counting the messages its saves send."""
    import redis

    from agentsessions.stores.redis import RedisStore

    prefix = f"agentsessions_bench_{secrets.token_hex(4)}:"
    pool = redis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=32, timeout=30, socket_timeout=30)
    client = redis.Redis(connection_pool=pool)
    store = RedisStore(client, prefix=prefix)
    sent = Counter[str]()
    script = store._save_run  # the benchmark looks inside: what each save_run sends

    def counted(keys: Sequence[Any], args: Sequence[Any]) -> Any:
        n = int(args[4])  # ARGV: id, token, end, unless_steered, n, the n seqs, known, keep, revision, bodies...
        sent["messages sent"] += len(args) - (5 + n + 3)
        sent["saves building on no stored revision"] += args[5 + n] == ""
        return script(keys, args)

    store._save_run = counted  # type: ignore[assignment]
    try:
        yield store, lambda: sent
    finally:
        for key in client.scan_iter(match=prefix + "*", count=1000):
            client.unlink(key)
        pool.disconnect()


def main() -> None:
    """Run the runs on each store and print the write counts."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lease", type=float, default=6.0)
    parser.add_argument("--tool-ms", type=float, default=20.0)
    parser.add_argument("--model-ms", type=float, default=20.0)
    parser.add_argument("--stores", default="postgres,redis")
    args = parser.parse_args()
    print(f"{args.runs} concurrent runs of {args.steps} tool-calling steps in one process; lease {args.lease} s")
    makers = {"postgres": postgres_store, "redis": redis_store}
    for name in args.stores.split(","):
        with contextlib.ExitStack() as stack:
            try:
                store, rows = stack.enter_context(makers[name]())
            except Exception as error:  # a missing driver or server: say so and go on
                print(f"{name}: skipped ({type(error).__name__}: {(str(error) or '-').splitlines()[0]})")
                continue
            counting = Counting(store)
            seconds, steps = run_all(counting, args.runs, args.steps, args.lease, args.tool_ms, args.model_ms)
            extra = rows()
            print(f"\n{name}: {steps:,} steps in {seconds:.1f} s ({steps / seconds:,.0f} steps/s); load {_load()}")
            print(f"  {'writes':<32} {'total':>9} {'per step':>9} {'per second':>11}")
            figures = dict(counting.calls)
            if isinstance(extra, tuple):
                figures["message rows inserted"], figures["message rows deleted"] = extra
            else:
                figures.update(extra)
            for what, total in sorted(figures.items()):
                print(f"  {what:<32} {total:>9,} {total / steps:>9.3f} {total / seconds:>11.2f}")


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
