"""gRPC server reflection under both names: ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

grpcurl and current gRPC clients ask ``grpc.reflection.v1``; older ones ``v1alpha``. The pinned
grpcio-reflection ships only v1alpha, but the two protocols are the same messages under another
package name, so one v1alpha servicer answers both: v1 is a second method handler over the
same (de)serialisers, and v1's file descriptor (v1alpha's, renamed) is added to the default
pool so that a client can also *describe* the v1 service.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1ALPHA_SERVICE = reflection.SERVICE_NAME
V1_SERVICE = "grpc.reflection.v1.ServerReflection"
SERVICE_NAMES = (V1_SERVICE, V1ALPHA_SERVICE)

_V1ALPHA_PACKAGE, _V1_PACKAGE = "grpc.reflection.v1alpha", "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_file() -> descriptor_pb2.FileDescriptorProto:
    """v1alpha's reflection.proto with its package (and every type reference) renamed to v1."""
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = _V1_FILE, _V1_PACKAGE
    old, new = f".{_V1ALPHA_PACKAGE}.", f".{_V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # scalars have none, and an empty one would be an error
                field.type_name = field.type_name.replace(old, new)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    return proto


def _register_v1_descriptor() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
    except KeyError:
        pool.AddSerializedFile(_v1_file().SerializeToString())


def enable(service_names: Sequence[str], server: grpc.Server) -> None:
    """Serve reflection for ``service_names`` (plus health and reflection themselves) under v1 and v1alpha."""
    _register_v1_descriptor()
    servicer = reflection.ReflectionServicer([*service_names, *SERVICE_NAMES])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(V1_SERVICE, {"ServerReflectionInfo": v1}),))
