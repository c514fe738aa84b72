"""``scripts/cluster``: a real Kubernetes control plane on loopback for the platform test tier.

    scripts/cluster up [--nodes FILE] [--state-dir DIR]   start it; the kubeconfig path is the last line
        [--kubelets N] [--device-mode MODE ...] [--dra]   plus N real kubelet nodes (kubelet-0 ...), each with
                                                          a fake CRI, a device plugin and optionally a DRA
                                                          driver (devcluster/kubelets.py)
    scripts/cluster down [--state-dir DIR]                stop exactly what `up` started there
    scripts/cluster bin NAME                              the path of a built binary (built if missing)
    scripts/cluster build                                 build every binary now (CI's first step)

Exit status 2 for bad input (a nodes file, an unknown binary), 1 when something fails to build or
start (the message names the component and ends with its log tail).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from devcluster import build, control_plane, kubelets, nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler and kwok")
    p_up.add_argument("--nodes", type=Path, help="nodes file (default: devcluster/data/nodes.yaml)")
    p_up.add_argument("--kubelets", type=int, default=0, metavar="N",
                      help="also start N real kubelet nodes (root; see devcluster/kubelets.py)")
    p_up.add_argument("--device-mode", action="append", choices=kubelets.DEVICE_MODES,
                      help="what node i's device plugin advertises, cycling through the modes given "
                           "(default: whole GPUs by UUID)")
    p_up.add_argument("--dra", action="store_true",
                      help="with --kubelets: each node also runs the DRA driver (gpu.nvidia.com ResourceSlices)")
    p_down = sub.add_parser("down", help="stop what `up` started")
    for p in (p_up, p_down):
        p.add_argument("--state-dir", type=Path, default=control_plane.default_state_dir())
    p_bin = sub.add_parser("bin", help="print the path of a binary, building it if missing")
    p_bin.add_argument("name", help=", ".join(sorted(build.BINARIES)))
    sub.add_parser("build", help="build every binary that is not in the cache yet")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(f"==> {line}", file=sys.stderr, flush=True)

    try:
        if args.command == "bin":
            print(build.build(args.name))
        elif args.command == "build":
            for name, path in build.build_all().items():
                print(f"{name}\t{path}")
        elif args.command == "up":
            start = time.monotonic()
            cluster = control_plane.up(args.state_dir, args.nodes, log=log)
            if args.kubelets:
                try:
                    kubelets.start(cluster, args.kubelets, modes=args.device_mode or ("whole",), dra=args.dra,
                                   log=log)
                except BaseException:
                    control_plane.down(args.state_dir)
                    raise
            log(f"cluster up in {time.monotonic() - start:.1f} s; `scripts/cluster down` stops it")
            print(cluster.kubeconfig)
        else:
            stopped = control_plane.down(args.state_dir)
            log(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    except nodes.NodesFileError as exc:
        print(f"scripts/cluster: {exc}", file=sys.stderr)
        return 2
    except build.BuildError as exc:
        print(f"scripts/cluster: {exc}", file=sys.stderr)
        return 2 if str(exc).startswith("unknown binary") else 1
    except control_plane.ClusterError as exc:
        print(f"scripts/cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
