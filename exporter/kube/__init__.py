"""Kubernetes attribution: which pod, namespace, container and team uses each GPU.

Entry points for the rest of the exporter:

* ``exporter.kube.attribution.KubernetesAttribution`` - the facade: ``start()``, ``stop()``,
  ``update_processes(...)`` and ``snapshot(devices, migs) -> AttributionSnapshot`` (no I/O);
* ``exporter.kube.series`` - pure helpers that turn a snapshot into workload label sets for the
  payload series and into the attribution's own metric families.
* ``exporter.kube.wiring`` - ``KubernetesWiring(settings).install(hub)``: the source's part of the app
  (a service, the once-per-render attribution hook, the families builder, process lists off the
  sampling thread), from its own ``exporter.kube.settings.KubernetesSettings``.

Sources, one module each: ``podresources`` (kubelet gRPC client and its canonical answer),
``deviceids`` (what a device ID names), ``allocation`` (device -> holders), ``metadata`` (pod and
namespace watches), ``processes`` (PID -> cgroup -> container), ``labels`` (team and pod-label
policy), ``resourceslices`` (this node's DRA ResourceSlices) and ``dra`` (a DRA claim's device ->
GPU or MIG instance, or why not).
"""
