"""``gpu-pod-exporter remediate``: Alertmanager webhooks about unhealthy GPUs become node Events and taints.

A small service beside the exporter (same package and image, its own Deployment): Alertmanager
posts allowlisted alerts to ``POST /alerts``; the remediator records an Event on the node and on
every pod of the GPU, and (when told to) taints the node, sets a node condition and an annotation
naming the unhealthy GPUs. It is dry-run by default; every limit that keeps it from doing harm at
scale is described in docs/remediation.md.

Modules, one concern each: ``alerts`` (the webhook payload), ``policy`` (the policy file),
``nodestate`` (our marks on a Node object and the patches between two states; pure), ``breaker``
(cooldown and circuit breaker; pure), ``events`` (Event bodies; pure), ``kubeapi`` (the write path
through the official ``kubernetes`` client, with retries), ``controller`` (alerts in, decisions and
API calls out), ``receiver`` (the HTTP listener), ``selfmetrics`` (its ``/metrics``), ``cli`` (the
subcommand). None of them is imported by the exporter.
"""
