package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// exitPlan is what a container's command declares: when it exits after starting, and with what code.
type exitPlan struct {
	after time.Duration
	code  int32
}

// runtime is Kubernetes' fake CRI with declared exits.
type runtime struct {
	*fake.RemoteRuntime
	mu    sync.Mutex
	plans map[string]exitPlan
}

func parsePlan(words []string) (exitPlan, bool, error) {
	plan, found := exitPlan{}, false
	for _, w := range words {
		if v, ok := strings.CutPrefix(w, "exit-after="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return plan, false, fmt.Errorf("exit-after=%q: %v", v, err)
			}
			plan.after, found = d, true
		}
		if v, ok := strings.CutPrefix(w, "exit-code="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return plan, false, fmt.Errorf("exit-code=%q: %v", v, err)
			}
			plan.code = int32(n)
		}
	}
	return plan, found, nil
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return resp, err
	}
	cfg := req.GetConfig()
	plan, found, perr := parsePlan(append(append([]string{}, cfg.GetCommand()...), cfg.GetArgs()...))
	if perr != nil {
		return nil, perr
	}
	if found {
		r.mu.Lock()
		r.plans[resp.ContainerId] = plan
		r.mu.Unlock()
	}
	return resp, nil
}

func (r *runtime) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return resp, err
	}
	id := req.GetContainerId()
	r.mu.Lock()
	plan, ok := r.plans[id]
	r.mu.Unlock()
	if ok {
		time.AfterFunc(plan.after, func() { r.exit(id, plan.code) })
	}
	return resp, nil
}

// exit marks a running container exited, as a runtime reports a process that ended.
func (r *runtime) exit(id string, code int32) {
	svc := r.RuntimeService
	svc.Lock()
	defer svc.Unlock()
	c, ok := svc.Containers[id]
	if !ok || c.State != kubeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	c.State = kubeapi.ContainerState_CONTAINER_EXITED
	c.FinishedAt = time.Now().UnixNano()
	c.ExitCode = code
	c.Reason = "Completed"
	if code != 0 {
		c.Reason = "Error"
	}
	log.Printf("container %s exited with code %d as declared", id, code)
}

func runCRI(args []string) error {
	fs := flag.NewFlagSet("cri", flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "unix:///path/to/cri.sock")
	_ = fs.Parse(args)
	path, ok := strings.CutPrefix(*endpoint, "unix://")
	if !ok || path == "" {
		return fmt.Errorf("--endpoint unix:///path required, got %q", *endpoint)
	}
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	r := &runtime{RemoteRuntime: fake.NewFakeRemoteRuntime(), plans: map[string]exitPlan{}}
	// What fake.RemoteRuntime.Start sets before it serves: the runtime and its network ready.
	r.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true}, {Type: kubeapi.NetworkReady, Status: true}}}
	// Every image "pulls" and has a size: the fake's default size 0 reads to the kubelet as an image
	// without one ("Id or size of image ... is not set"), and the container never starts.
	r.ImageService.SetFakeImageSize(1 << 20)
	srv := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(srv, r)
	kubeapi.RegisterImageServiceServer(srv, r)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; srv.Stop() }()
	log.Printf("CRI (fake runtime, declared exits) on %s", path)
	return srv.Serve(lis)
}
