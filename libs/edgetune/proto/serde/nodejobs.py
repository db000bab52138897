"""A node's profiling jobs on the wire (``nodejobs.proto``): queue jobs and their measurements.

A job's payload stays what the queue holds (a ProfileRequest as JSON: the agent parses it, as it
does a job read from the store). Measurements arrive as ``Measurement`` messages and become store
records of the job's node: the node a message names is overwritten, never trusted.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from edgetune.errors import InvalidArgument
from edgetune.proto.serde.common import measurement_from_proto
from edgetune.proto.v1 import common_pb2, nodejobs_pb2
from edgetune.store import Job, MeasurementRecord

#: A payload larger than this is refused (a ProfileRequest is a few KB; the limits walk caps strings at 4 KB).
MAX_PAYLOAD_CHARS = 1_000_000


def job_to_proto(job: Job) -> nodejobs_pb2.NodeJob:
    return nodejobs_pb2.NodeJob(job_id=job.job_id, entry_id=job.entry_id,
                                payload_json=json.dumps(dict(job.payload), separators=(",", ":")),
                                deliveries=int(job.deliveries))


def job_from_proto(msg: nodejobs_pb2.NodeJob, node_id: str, consumer: str) -> Job:
    """The delivered job of ``node_id`` held by ``consumer``; InvalidArgument naming ``payload_json``."""
    if len(msg.payload_json) > MAX_PAYLOAD_CHARS:
        raise InvalidArgument("payload_json", f"{len(msg.payload_json)} characters", f"at most {MAX_PAYLOAD_CHARS}")
    try:
        payload: Any = json.loads(msg.payload_json or "{}")
    except ValueError as exc:
        raise InvalidArgument("payload_json", f"not JSON: {exc}", "a JSON object") from None
    if not isinstance(payload, Mapping):
        raise InvalidArgument("payload_json", f"a JSON {type(payload).__name__}", "a JSON object")
    return Job(node_id=node_id, job_id=msg.job_id, entry_id=msg.entry_id, payload=dict(payload), consumer=consumer,
               deliveries=int(msg.deliveries) or 1)


def acknowledged(node_id: str, job_id: str, entry_id: str) -> Job:
    """The job a Complete / Refuse names (what acknowledging needs: its node and entry)."""
    for value, name in ((job_id, "job_id"), (entry_id, "entry_id")):
        if not value:
            raise InvalidArgument(name, "is empty", "the id ClaimJobs gave")
    return Job(node_id=node_id, job_id=job_id, entry_id=entry_id, payload={}, consumer="")


def measurements_from_proto(msgs: Iterable[common_pb2.Measurement], node_id: str) -> list[MeasurementRecord]:
    """Store records of ``node_id``'s measurements; InvalidArgument naming ``measurements[i]``."""
    out = []
    for i, msg in enumerate(msgs):
        try:
            # the job's node, whatever the message says
            out.append(dataclasses.replace(measurement_from_proto(msg), node_id=node_id))
        except InvalidArgument as exc:
            raise exc.prefixed(f"measurements[{i}]") from None
    return out

