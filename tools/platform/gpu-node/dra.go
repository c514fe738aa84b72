package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

// draDriver publishes the simulated GPUs in a ResourceSlice of the node's pool, as NVIDIA's DRA
// driver (gpu.nvidia.com) names and describes them (simulator/dra_devices.py), and prepares claims:
// the kubelet's DRA manager then reports the claim's devices in PodResources' dynamic_resources.
type draDriver struct {
	driver string
}

func (d *draDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var result kubeletplugin.PrepareResult
		if claim.Status.Allocation != nil {
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Driver != d.driver {
					continue
				}
				result.Devices = append(result.Devices, kubeletplugin.Device{
					Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
					CDIDeviceIDs: []string{fmt.Sprintf("k8s.%s/gpu=%s", d.driver, r.Device)},
					ShareID:      r.ShareID,
				})
			}
		}
		log.Printf("prepare claim %s/%s: %d devices", claim.Namespace, claim.Name, len(result.Devices))
		out[claim.UID] = result
	}
	return out, nil
}

func (d *draDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, claim := range claims {
		log.Printf("unprepare claim %s", claim.String())
		out[claim.UID] = nil
	}
	return out, nil
}

func (d *draDriver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
}

func runDRA(args []string) error {
	fs := flag.NewFlagSet("dra", flag.ExitOnError)
	driver := fs.String("driver", "gpu.nvidia.com", "driver name")
	node := fs.String("node", "", "the node's name (its pool's name too)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig to publish ResourceSlices with")
	registry := fs.String("registry", "", "the kubelet's plugins_registry directory")
	data := fs.String("data", "", "this driver's directory for its DRA socket")
	var gpus resourceFlags
	fs.Var(&gpus, "gpu", "INDEX:UUID (repeatable)")
	_ = fs.Parse(args)
	if *node == "" || *kubeconfig == "" || *registry == "" || *data == "" || len(gpus) == 0 {
		return fmt.Errorf("--node, --kubeconfig, --registry, --data and at least one --gpu are required")
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	var devices []resourceapi.Device
	for _, g := range gpus {
		index, uuid, ok := strings.Cut(g, ":")
		n, err := strconv.Atoi(index)
		if !ok || err != nil {
			return fmt.Errorf("--gpu %q: expected INDEX:UUID", g)
		}
		devices = append(devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", n),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":        {StringValue: ptr.To("gpu")},
				"uuid":        {StringValue: ptr.To(uuid)},
				"index":       {IntValue: ptr.To(int64(n))},
				"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			},
			// An admin-access claim may take a device that others hold; several claims may
			// share one (AllowMultipleAllocations) only where the driver says so: not here.
		})
	}
	if err := os.MkdirAll(*data, 0o750); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	helper, err := kubeletplugin.Start(ctx, &draDriver{driver: *driver},
		kubeletplugin.DriverName(*driver), kubeletplugin.NodeName(*node), kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(*registry), kubeletplugin.PluginDataDirectoryPath(*data),
		kubeletplugin.Serialize(false))
	if err != nil {
		return err
	}
	defer helper.Stop()
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		*node: {Slices: []resourceslice.Slice{{Devices: devices}}}}}); err != nil {
		return err
	}
	log.Printf("DRA driver %s: %d devices published for node %s", *driver, len(devices), *node)
	<-ctx.Done()
	return nil
}
