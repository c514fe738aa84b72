package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	dp "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type resourceFlags []string

func (r *resourceFlags) String() string     { return strings.Join(*r, " ") }
func (r *resourceFlags) Set(v string) error { *r = append(*r, v); return nil }

// plugin serves one extended resource's devices.
type plugin struct {
	dp.UnimplementedDevicePluginServer
	resource string
	ids      []string
	socket   string // file name under the device-plugins directory
	srv      *grpc.Server
}

// serve listens on the plugin's socket (anew: a restarting kubelet deletes it) and serves there.
func (p *plugin) serve(dir string) error {
	if p.srv != nil {
		p.srv.Stop()
	}
	path := filepath.Join(dir, p.socket)
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	p.srv = grpc.NewServer()
	dp.RegisterDevicePluginServer(p.srv, p)
	srv := p.srv
	go func() { _ = srv.Serve(lis) }()
	return nil
}

func (p *plugin) GetDevicePluginOptions(context.Context, *dp.Empty) (*dp.DevicePluginOptions, error) {
	return &dp.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *dp.Empty, stream grpc.ServerStreamingServer[dp.ListAndWatchResponse]) error {
	devices := make([]*dp.Device, 0, len(p.ids))
	for _, id := range p.ids {
		devices = append(devices, &dp.Device{ID: id, Health: dp.Healthy})
	}
	if err := stream.Send(&dp.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done() // the devices never change: hold the stream until the kubelet drops it
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *dp.AllocateRequest) (*dp.AllocateResponse, error) {
	resp := &dp.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		log.Printf("Allocate %s: %v", p.resource, c.GetDevicesIds())
		// What the NVIDIA device plugin's envvar strategy hands the container runtime.
		resp.ContainerResponses = append(resp.ContainerResponses, &dp.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.GetDevicesIds(), ",")}})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *dp.PreStartContainerRequest) (*dp.PreStartContainerResponse, error) {
	return &dp.PreStartContainerResponse{}, nil
}

func register(dir string, p *plugin) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = dp.NewRegistrationClient(conn).Register(ctx, &dp.RegisterRequest{
		Version: dp.Version, Endpoint: p.socket, ResourceName: p.resource})
	return err
}

func inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}

func runDevicePlugin(args []string) error {
	fs := flag.NewFlagSet("deviceplugin", flag.ExitOnError)
	dir := fs.String("dir", dp.DevicePluginPath, "the kubelet's device-plugins directory")
	var resources resourceFlags
	fs.Var(&resources, "resource", "NAME=ID,ID,… (repeatable)")
	_ = fs.Parse(args)
	if len(resources) == 0 {
		return fmt.Errorf("at least one --resource NAME=ID,… is required")
	}
	var plugins []*plugin
	for i, spec := range resources {
		name, ids, ok := strings.Cut(spec, "=")
		if !ok || name == "" || ids == "" {
			return fmt.Errorf("--resource %q: expected NAME=ID,ID,…", spec)
		}
		p := &plugin{resource: name, ids: strings.Split(ids, ","),
			socket: fmt.Sprintf("gpu-node-%d-%s.sock", i, strings.NewReplacer("/", "_", ".", "_").Replace(name))}
		if err := p.serve(*dir); err != nil {
			return err
		}
		plugins = append(plugins, p)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	kubelet := filepath.Join(*dir, "kubelet.sock")
	var registered uint64
	for {
		// A kubelet that restarts removes every socket in the directory (ours too) and creates its
		// registration socket anew: re-listen and register again, as the NVIDIA device plugin does.
		if ino := inode(kubelet); ino != 0 && ino != registered {
			ok := true
			for _, p := range plugins {
				if inode(filepath.Join(*dir, p.socket)) == 0 {
					log.Printf("%s: our socket is gone (a kubelet restart cleans the directory): serving anew", p.resource)
					if err := p.serve(*dir); err != nil {
						return err
					}
				}
				if err := register(*dir, p); err != nil {
					log.Printf("register %s: %v (retrying)", p.resource, err)
					ok = false
					break
				}
				log.Printf("registered %s with %d devices", p.resource, len(p.ids))
			}
			if ok {
				registered = ino
			}
		}
		select {
		case <-stop:
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}
