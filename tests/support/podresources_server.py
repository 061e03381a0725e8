"""A kubelet PodResources server for the tests: the v1.PodResourcesLister service, compiled at
start from tests/support/podresources/v1/api.proto by grpcio's protoc, on a Unix socket as the
kubelet serves it. It answers List, Get and GetAllocatableResources from a JSON file in the
proto's own JSON form (a ListPodResourcesResponse), and records each call's method, one JSON
line per call, in the calls file.

    podresources_server.py SOCKET PODS.json CALLS.jsonl

Prints "ready" once it serves.
"""
import json
import os
import sys
import tempfile
from concurrent import futures

import grpc
from google.protobuf import json_format
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_api(out):
    include = os.path.join(HERE, "podresources")
    proto_include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    code = protoc.main([
        "protoc", f"-I{include}", f"-I{proto_include}",
        f"--python_out={out}", f"--grpc_python_out={out}", "v1/api.proto",
    ])
    if code != 0:
        sys.exit(f"protoc failed on v1/api.proto ({code})")
    sys.path.insert(0, out)
    from v1 import api_pb2, api_pb2_grpc  # noqa: E402  (generated just now)
    return api_pb2, api_pb2_grpc


def main():
    socket, pods_path, calls_path = sys.argv[1:4]
    api_pb2, api_pb2_grpc = compile_api(tempfile.mkdtemp(prefix="podresources-"))
    with open(pods_path) as f:
        pods = json_format.ParseDict(json.load(f), api_pb2.ListPodResourcesResponse())
    calls = open(calls_path, "a", buffering=1)

    class Lister(api_pb2_grpc.PodResourcesListerServicer):
        def List(self, request, context):
            calls.write(json.dumps({"method": "List"}) + "\n")
            return pods

        def Get(self, request, context):
            calls.write(json.dumps({"method": "Get"}) + "\n")
            for pod in pods.pod_resources:
                if (pod.name, pod.namespace) == (request.pod_name, request.pod_namespace):
                    return api_pb2.GetPodResourcesResponse(pod_resources=pod)
            context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")

        def GetAllocatableResources(self, request, context):
            calls.write(json.dumps({"method": "GetAllocatableResources"}) + "\n")
            devices = [d for p in pods.pod_resources for c in p.containers for d in c.devices]
            return api_pb2.AllocatableResourcesResponse(devices=devices)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
