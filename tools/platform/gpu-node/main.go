// gpu-node: the node-side programs of scripts/cluster's real kubelet nodes (issue 40).
//
//	gpu-node cri --endpoint unix:///…/cri.sock
//	gpu-node deviceplugin --dir <root-dir>/device-plugins --resource nvidia.com/gpu=ID,ID,… [--resource …]
//
// cri serves the CRI (k8s.io/cri-api) with Kubernetes' fake runtime (k8s.io/cri-client/pkg/fake),
// plus one thing the fake lacks: a container whose command or args hold "exit-after=<duration>"
// (and optionally "exit-code=<n>") is marked exited that long after it started, so the kubelet sees
// pods finish as they declare. Nothing runs: a container is a record.
//
// deviceplugin serves the kubelet's device plugin API (k8s.io/kubelet deviceplugin v1beta1) for
// each --resource, with the given device IDs (whole-GPU UUIDs, time-slicing replicas
// GPU-<uuid>::<n>, MIG UUIDs, GKE's nvidia<N>: the caller chooses), registers with the kubelet at
// <dir>/kubelet.sock, and registers again whenever that socket is created anew (a kubelet restart).
//
//	gpu-node dra --node NAME --kubeconfig F --registry <root-dir>/plugins_registry --data DIR --gpu INDEX:UUID …
//
// dra is a DRA driver (gpu.nvidia.com) on k8s.io/dynamic-resource-allocation/kubeletplugin: it
// publishes the GPUs in a ResourceSlice of the node's pool and prepares the claims the kubelet hands it.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gpu-node cri|deviceplugin|dra [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "cri":
		err = runCRI(os.Args[2:])
	case "deviceplugin":
		err = runDevicePlugin(os.Args[2:])
	case "dra":
		err = runDRA(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: cri or deviceplugin", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-node:", err)
		os.Exit(1)
	}
}
