"""``gpu-pod-exporter remediate``: Alertmanager webhooks about unhealthy GPUs become node Events and taints.

A small service beside the exporter (same package and image, its own Deployment): Alertmanager
posts allowlisted alerts to ``POST /alerts``; the remediator records an Event on the node and on
every pod of the GPU, and (when told to) taints the node, sets a node condition and an annotation
naming the unhealthy GPUs. Every limit that keeps it from doing harm at scale (dry-run by default,
idempotency, per-node cooldown, a circuit breaker on nodes per hour and share of GPU nodes
tainted) lives in ``planner`` and ``breaker``; docs/remediation.md explains them.

Modules: ``alerts`` (webhook payload), ``policy`` (configuration), ``ledger`` (what the alerts say
about each node), ``planner`` and ``breaker`` (pure decisions), ``nodestate`` (our marks on a Node
object), ``kubeapi`` (the write path through the official ``kubernetes`` client), ``events``
(Event bodies), ``controller`` (the reconcile loop), ``receiver`` (HTTP), ``selfmetrics``,
``cli`` (the subcommand).
"""
