"""Issue 25: a tuning job lost with Redis' data is reported as lost, not as never there.

Before: after Redis restarted empty an in-flight job answered NOT_FOUND and its watcher's stream
ended the same way; nothing told the submitter. Now the watcher's stream and ``GetTuningJob`` (also
on a replica that never served the job) end DATA_LOSS saying the job was lost with the store's
data and must be submitted again, ``edgetune job get`` prints that, and submitting it again works.
A real redis-server restarted without persistence loses the data.
"""

from __future__ import annotations

import grpc
import harness
import pytest
from click.testing import CliRunner

from edgetune.cli import cli
from edgetune.control.registry import NodeRecord
from edgetune.proto.v1 import common_pb2, coordinator_pb2_grpc, tuning_pb2
from edgetune.store import EmbeddedRedisServer, open_store


def _spec() -> tuning_pb2.TuningJobSpec:
    return tuning_pb2.TuningJobSpec(name="mnv3", workload=common_pb2.Workload(name="mobilenetv3"),
                                    nodes=["jetson-a"], profiles=12)


def test_a_job_lost_with_redis_data_is_reported_to_its_watcher_and_by_job_get():
    redis = EmbeddedRedisServer(port=0)
    redis.start()
    port = redis.port
    store, other_store = open_store(redis.url), open_store(redis.url)
    try:
        with harness.coordinator(store) as c, harness.coordinator(other_store, leader=False) as standby:
            standby.server.lost_jobs.records.refresh_s = 0.2
            c.servicer.registry.register(NodeRecord(node_id="jetson-a"))
            stub = coordinator_pb2_grpc.CoordinatorStub(grpc.insecure_channel(c.server.address))
            job = stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=_spec()))
            watch = stub.WatchTuningJob(tuning_pb2.WatchTuningJobRequest(name="mnv3"), timeout=60)
            assert next(watch).spec.name == "mnv3"
            # The standby never served the job; its periodic listing saw it.
            harness.wait_for(lambda: standby.server.lost_jobs.records.lost("mnv3") is None
                             and "mnv3" in standby.server.lost_jobs.records._seen or None, 20,
                             "the standby to list the job")

            redis.stop()  # Redis restarts empty: no AOF, no data
            redis = EmbeddedRedisServer(port=port)
            redis.start()

            with pytest.raises(grpc.RpcError) as err:
                for _update in watch:
                    pass
            assert err.value.code() == grpc.StatusCode.DATA_LOSS, err.value
            assert "'mnv3' was lost" in err.value.details() and "submit it again" in err.value.details()
            for address in (c.server.address, standby.server.address):
                replica = coordinator_pb2_grpc.CoordinatorStub(grpc.insecure_channel(address))
                with pytest.raises(grpc.RpcError) as err:
                    replica.GetTuningJob(tuning_pb2.GetTuningJobRequest(name="mnv3"), timeout=30)
                assert err.value.code() == grpc.StatusCode.DATA_LOSS, (address, err.value)
            shown = CliRunner().invoke(cli, ["job", "get", "mnv3", "--coordinator", c.server.address])
            assert shown.exit_code != 0 and "mnv3' was lost" in shown.output, shown.output
            # A name never seen stays NOT_FOUND.
            with pytest.raises(grpc.RpcError) as err:
                stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name="never-there"), timeout=30)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND

            # Submitted again, the job is back, and no longer reported lost.
            c.servicer.registry.register(NodeRecord(node_id="jetson-a"))
            again = stub.SubmitTuningJob(tuning_pb2.SubmitTuningJobRequest(spec=_spec()), timeout=30)
            assert again.spec.name == "mnv3" and again.revision > 0 and job.revision > 0
            assert stub.GetTuningJob(tuning_pb2.GetTuningJobRequest(name="mnv3"), timeout=30).spec.name == "mnv3"
    finally:
        store.close()
        other_store.close()
        redis.stop()


def test_the_store_names_its_incarnation_and_a_new_one_after_losing_its_data():
    from edgetune.store import MemoryStore
    from edgetune.store.lost import LostRecords

    memory = MemoryStore()
    first = memory.incarnation()
    assert first == memory.incarnation() and "@" in first
    lost = LostRecords(memory, "tuning-job-spec", what="tuning job", refresh_s=0)
    memory.put_doc("tuning-job-spec", "j1", {"x": 1})
    lost.refresh()
    assert lost.lost("j1") is None and lost.lost("never") is None
    memory.lose_everything()
    assert memory.incarnation() != first and memory.get_doc("tuning-job-spec", "j1", missing_ok=True) is None
    assert "tuning job 'j1' was lost" in lost.lost("j1") and lost.lost("never") is None
    with EmbeddedRedisServer(port=0) as redis, open_store(redis.url) as store, open_store(redis.url) as other:
        name = store.incarnation()
        assert other.incarnation() == name  # every client of one store reads the same
        store.client.flushall()
        assert store.incarnation() != name
