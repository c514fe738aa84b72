"""The kubelet PodResources v1 API: proto, committed grpcio stubs, canonical answer, client."""
