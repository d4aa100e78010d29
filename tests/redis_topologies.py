"""Real Redis topologies for tests, built from `tests/redis_server.py`'s servers on loopback.

    with RedisClusterNodes() as cluster:     # 6 nodes: 3 primaries, 3 replicas, all slots covered
        cluster.url                          # redis://127.0.0.1:<port of a node>/0
        cluster.primary_of(slot)             # the RedisServer serving a slot now
        cluster.kill(server)                 # its replica takes over after cluster-node-timeout
        cluster.migrate_slot(slot, dest)     # MIGRATING/IMPORTING + MIGRATE + SETSLOT NODE

    with RedisSentinels() as sentinel:       # 1 primary + 1 replica + 3 Sentinels (quorum 2)
        sentinel.urls; sentinel.master       # for state.sentinel
        sentinel.kill_master()               # the Sentinels promote the replica

Timeouts are short (node timeout 1 s, down-after 500 ms) so a failover is over in a few seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from tests.ports import free_port
from tests.redis_server import RedisServer

CLUSTER_NODE_TIMEOUT_MS = 1000
SENTINEL_DOWN_AFTER_MS = 500
MASTER = "gwmaster"
# a replica syncs at once (not after the default 5 s diskless delay) and may always take over
FAST_REPLICATION = ("--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0")


def _poll(cond: object, what: str, timeout_s: float = 20.0) -> None:
    """Wait for a condition of the engines under test (they offer no event); bounded, fails loudly."""
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling another process's state, bounded by the deadline


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)


def _myid(client: redis.Redis) -> str:
    raw = client.execute_command("CLUSTER MYID")
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class _Topology:
    """Several processes started as one: `with` starts them all, and closes those already started when
    one fails to start, so a failed start leaves no process behind."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class RedisClusterNodes(_Topology):
    def __init__(self, nodes: int = 6) -> None:
        self.servers = [
            RedisServer(extra_args=("--cluster-enabled", "yes",
                                    "--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS),
                                    "--cluster-config-file", "nodes.conf", *FAST_REPLICATION), cluster_bus=True)
            for _ in range(nodes)]

    @property
    def url(self) -> str:
        return next(s for s in self.servers if s.running).url

    def start(self) -> None:
        for server in self.servers:
            server.start()
        addrs = [f"127.0.0.1:{s.port}" for s in self.servers]
        subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=30)
        _poll(self._healthy, "the cluster to cover every slot")
        _poll(self._replicas_synced, "every replica to sync with its primary")

    def _replicas_synced(self) -> bool:
        primaries = self.primaries()
        replicas = [s for s in self.servers if s not in primaries]
        return all(_client(s.port).info("replication").get("master_link_status") == "up" for s in replicas)

    def _healthy(self) -> bool:
        for server in self.servers:
            if not server.running:
                continue
            try:
                info = _client(server.port).cluster("INFO")
            except redis.RedisError:
                return False
            if info.get("cluster_state") != "ok":
                return False
        return True

    def _slots(self) -> list[tuple[int, int, int]]:
        """(first slot, last slot, primary port) as a live node sees it."""
        live = next(s for s in self.servers if s.running)
        rows = _client(live.port).execute_command("CLUSTER SLOTS")  # [first, last, [host, port, id], replicas...]
        return [(int(r[0]), int(r[1]), int(r[2][1])) for r in rows]

    def primary_of(self, slot: int) -> RedisServer:
        port = next(p for lo, hi, p in self._slots() if lo <= slot <= hi)
        return next(s for s in self.servers if s.port == port)

    def primaries(self) -> list[RedisServer]:
        ports = {p for _lo, _hi, p in self._slots()}
        return [s for s in self.servers if s.port in ports]

    def kill(self, server: RedisServer) -> None:
        server.kill()

    def wait_failover(self, slot: int, old: RedisServer) -> RedisServer:
        """Until a live node serves `slot` (a replica of `old` took over) and the cluster is ok."""
        def moved() -> bool:
            try:
                return self.primary_of(slot) is not old and self._healthy()
            except (redis.RedisError, StopIteration):
                return False
        _poll(moved, f"slot {slot} to fail over from port {old.port}")
        return self.primary_of(slot)

    def wait_rejoined(self, server: RedisServer) -> None:
        """Until a restarted node is a replica in sync and the cluster is ok again."""
        def rejoined() -> bool:
            try:
                info = _client(server.port).info("replication")
            except redis.RedisError:
                return False
            return info.get("role") == "slave" and info.get("master_link_status") == "up" and self._healthy()
        _poll(rejoined, f"port {server.port} to rejoin as a replica")

    def migrate_slot(self, slot: int, dest: RedisServer) -> None:
        """Move one slot with its keys, as `redis-cli --cluster reshard` does, one key batch at a time."""
        source = self.primary_of(slot)
        src, dst = _client(source.port), _client(dest.port)
        src_id, dst_id = _myid(src), _myid(dst)
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 10):
            src.execute_command("MIGRATE", "127.0.0.1", dest.port, "", 0, 5000, "KEYS", *keys)
        others = [s for s in self.primaries() if s not in (source, dest)]
        for server in [dest, source, *others]:  # the new owner first, as redis-cli does
            _client(server.port).execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)

    def close(self) -> None:
        for server in self.servers:
            server.close()


class _SentinelProcess:
    def __init__(self, master_port: int) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="gateway-sentinel-"))
        conf = self._dir / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self._dir}\nlogfile {self._dir / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {SENTINEL_DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 5000\nsentinel parallel-syncs {MASTER} 1\n")
        self._proc = subprocess.Popen(["redis-server", str(conf), "--sentinel"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def wait_ready(self) -> None:
        def answers() -> bool:
            try:
                return bool(_client(self.port).ping())
            except redis.RedisError:
                return False
        _poll(answers, f"sentinel on {self.port}")

    def master_port(self) -> int:
        addr = _client(self.port).execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", MASTER)
        return int(addr[1])

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


class RedisSentinels(_Topology):
    def __init__(self) -> None:
        self.primary = RedisServer(extra_args=FAST_REPLICATION[:2])
        self.replica: RedisServer | None = None
        self._sentinels: list[_SentinelProcess] = []
        self.master = MASTER

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{s.port}" for s in self._sentinels]

    def start(self) -> None:
        self.primary.start()
        self.replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(self.primary.port),
                                                  *FAST_REPLICATION[:2]))
        self.replica.start()
        replica = self.replica
        _poll(lambda: _client(replica.port).info("replication").get("master_link_status") == "up",
              "the replica to sync")
        self._sentinels = [_SentinelProcess(self.primary.port) for _ in range(3)]
        for s in self._sentinels:
            s.wait_ready()
        # each Sentinel must have found the replica and the other Sentinels before a failover can run
        _poll(self._sentinels_know_each_other, "the Sentinels to find each other and the replica")

    def _sentinels_know_each_other(self) -> bool:
        for s in self._sentinels:
            info = _client(s.port).sentinel_master(MASTER)
            if int(info["num-other-sentinels"]) < 2 or int(info["num-slaves"]) < 1:
                return False
        return True

    def master_server(self) -> RedisServer:
        port = self._sentinels[0].master_port()
        assert self.replica is not None
        return self.primary if port == self.primary.port else self.replica

    def kill_master(self) -> RedisServer:
        old = self.master_server()
        old.kill()
        return old

    def wait_failover(self, old: RedisServer) -> RedisServer:
        def promoted() -> bool:
            try:
                return all(s.master_port() != old.port for s in self._sentinels)
            except redis.RedisError:
                return False
        _poll(promoted, "the Sentinels to promote the replica")
        return self.master_server()

    def close(self) -> None:
        for s in self._sentinels:
            s.close()
        self.primary.close()
        if self.replica is not None:
            self.replica.close()
