"""How the exporter reaches the Kubernetes API server: authenticated GETs for list and watch, over urllib3.

Why not the ``kubernetes`` package's client: its config loaders and ``ApiClient`` import
``kubernetes.client``, whose package import loads every generated API and model class (pydantic
models in kubernetes 37): about 30 MiB of resident memory in a DaemonSet pod on every GPU node,
for GET endpoints whose JSON the watch loop (``exporter.kube.reflector``) parses itself. So the connection
settings are read here, for the shapes a DaemonSet and an operator's kubeconfig actually have:

* in cluster (no ``--kubeconfig``): ``KUBERNETES_SERVICE_HOST``/``_PORT``, the service account's
  CA and token. The token file is re-read before every request: bound service account tokens
  expire (one hour by default) and the kubelet rewrites the file well before that;
* a kubeconfig file: the current context's cluster (``server``, ``certificate-authority[-data]``,
  ``insecure-skip-tls-verify``, ``tls-server-name``) and user (``token``, ``tokenFile``,
  ``client-certificate[-data]``/``client-key[-data]``, ``username``/``password``); relative paths
  are relative to the kubeconfig's directory, as kubectl reads them.

Anything else in the user or cluster entry (an ``exec`` credential plugin, an ``auth-provider``,
a ``proxy-url``), and a ``KUBECONFIG``-style list of files to merge, is the kubernetes package's
business: such a kubeconfig is handed to its loader
(``build_core_v1_api`` below), and only then is the heavy client imported.
An ``exec`` plugin or an ``auth-provider`` gets credentials by running a program; the exporter
runs none unless ``--kubeconfig-allow-exec`` is given (``credential_plugins`` finds them, in every
file of a list, and the refusal names the file, the user and the program).

This is the project's one Kubernetes API client: the exporter's reflectors (lists and watches,
``exporter.kube.reflector``), the remediator and ``report quota`` (writes, ``exporter.remediate.kubeapi``)
and the doctor (``SelfSubjectAccessReview``) all send through ``request`` of the transport
``build_lists`` chooses. Requests carry the same query parameters, ``Accept`` header and bearer token
the generated client sends, and the exporter's ``User-Agent``; urllib3's own retries are off. A
non-2xx answer raises ``ApiError`` (``ApiConflictError`` for 409) with ``status``, ``reason``, the
body and the server's ``Retry-After`` (read by ``exporter.backoff.retry_after_seconds``, the one
parser), whichever transport sent the request; anything else that stops a request becomes an
``ApiError`` with status 0 through ``as_api_error``. The one retry policy for single calls
(``call_with_retries``: transient failures retried in the windows of ``exporter.backoff``,
``Retry-After`` honoured) is here too; the watch loop paces its relists with the same
``exporter.backoff``. This module imports nothing else of ``exporter.kube``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import random
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import urllib3

from exporter import __version__, safeyaml
from exporter.backoff import Backoff, BackoffPolicy, retry_after_seconds
from exporter.inputfile import InputFileError, read_text
from exporter.logs import get_logger

log = get_logger("kube.client")

T = TypeVar("T")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# Keyword arguments the watch loop passes (CoreV1Api's names) -> the API's query parameter names.
QUERY_NAMES: Mapping[str, str] = MappingProxyType({
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "watch": "watch",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "timeout_seconds": "timeoutSeconds",
    "field_manager": "fieldManager",
    "force": "force",
    "dry_run": "dryRun",
})

# Answers worth another attempt: throttled (429) or the server (or a proxy in front) failing for now.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
JSON = "application/json"

KNOWN_CLUSTER_KEYS = frozenset({"server", "certificate-authority", "certificate-authority-data",
                                "insecure-skip-tls-verify", "tls-server-name", "extensions"})
KNOWN_USER_KEYS = frozenset({"token", "tokenFile", "client-certificate", "client-certificate-data",
                             "client-key", "client-key-data", "username", "password", "extensions"})


class ApiConfigError(Exception):
    """The API server cannot be reached as configured (the message says which file and key)."""


class ApiError(Exception):
    """A request failed: the API server answered ``status`` (e.g. 410, ``reason`` e.g. Gone), or, with
    status 0, no answer came (connection refused, timeout, an answer that is not JSON).

    ``body`` is the answer's body (a ``Status`` object as JSON, at most 64 KiB); ``retry_after`` the
    ``Retry-After`` header in seconds (429 from API Priority and Fairness, 504 for a resourceVersion
    the server has not reached), None without one. ``message`` is ``reason`` as given; ``detail``
    the ``Status`` message of the body when there is one (what a person needs: "nodes is forbidden: ...").
    """

    def __init__(self, status: int, reason: str, body: bytes = b"", retry_after: float | None = None) -> None:
        super().__init__(f"({status}) {reason}" if status else reason)
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after = retry_after

    @property
    def message(self) -> str:
        return self.reason

    @property
    def detail(self) -> str:
        with contextlib.suppress(TypeError, ValueError, AttributeError):
            text = json.loads(self.body).get("message") if self.body else None
            if text:
                return str(text)
        return self.reason


class ApiConflictError(ApiError):
    """409: the object changed since it was read, or (for a create) it exists already."""


def status_error(status: int, reason: str, body: bytes = b"", retry_after: float | None = None) -> ApiError:
    """The error for a non-2xx answer: ``ApiConflictError`` for 409, ``ApiError`` for the rest."""
    return (ApiConflictError if status == 409 else ApiError)(status, reason, body, retry_after)


def as_api_error(exc: BaseException) -> ApiError:
    """Anything a request raised -> ``ApiError``: itself, or status 0 naming the exception (no answer)."""
    if isinstance(exc, ApiError):
        return exc
    return ApiError(0, f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class ApiEndpoint:
    """Everything needed to send an authenticated GET to the API server."""

    server: str  # scheme://host[:port], no trailing slash
    source: str  # "in-cluster service account" or the kubeconfig path, for messages
    ca_file: str | None = None
    ca_pem: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)  # secrets stay out of reprs and logs
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)

    def authorization(self) -> str | None:
        """The Authorization header value for the next request (a token file is read each time)."""
        if self.token_file:
            try:
                token = Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ApiConfigError(f"{self.source}: cannot read token file {self.token_file}: "
                                     f"{exc.strerror or exc}") from exc
            if token:
                return f"Bearer {token}"
        if self.token:
            return f"Bearer {self.token}"
        if self.basic_auth:
            user, password = self.basic_auth
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return None


def in_cluster_endpoint(environ: Mapping[str, str] | None = None,
                        account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiEndpoint:
    """The API server as a pod sees it: the service's environment variables and the service account."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "")
    port = env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ApiConfigError("not running in a pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT unset); "
                             "give --kubeconfig to run outside the cluster")
    token_file = account_dir / "token"
    ca_file = account_dir / "ca.crt"
    for needed in (token_file, ca_file):
        if not needed.is_file():
            raise ApiConfigError(f"service account file {needed} is missing (is automountServiceAccountToken "
                                 "off for this pod?)")
    server_host = f"[{host}]" if ":" in host else host
    return ApiEndpoint(server=f"https://{server_host}:{port}", source="in-cluster service account",
                       ca_file=str(ca_file), token_file=str(token_file))


def _named(entries: Any, name: str, kind: str, path: Path) -> dict[str, Any]:
    for entry in entries or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(kind)
            if not isinstance(body, dict):
                raise ApiConfigError(f"{path}: {kind} {name!r} has no {kind!r} map")
            return body
    raise ApiConfigError(f"{path}: no {kind} named {name!r} in '{kind}s'")


def _decode_data(value: Any, path: Path, key: str) -> bytes:
    try:
        return base64.b64decode("".join(str(value).split()), validate=True)  # wrapped lines are fine
    except (binascii.Error, ValueError) as exc:
        raise ApiConfigError(f"{path}: {key} is not valid base64") from exc


def _read_file(base: Path, value: Any, path: Path, key: str) -> bytes:
    target = Path(str(value))
    target = target if target.is_absolute() else base / target
    try:
        return target.read_bytes()
    except OSError as exc:
        raise ApiConfigError(f"{path}: {key}: cannot read {target}: {exc.strerror or exc}") from exc


def read_kubeconfig(path: Path) -> Any:
    """The kubeconfig as plain data: a regular file of at most 4 MiB, YAML within safeyaml's bounds."""
    try:
        root = safeyaml.compose(read_text(path, 4 * 1024 * 1024), allow_aliases=True)
        return None if root is None else safeyaml.construct(root)
    except InputFileError as exc:
        raise ApiConfigError(f"{path}: cannot read the kubeconfig: {exc}") from None
    except safeyaml.YamlInputError as exc:
        raise ApiConfigError(f"{path}{f':{exc.line}' if exc.line else ''}: {exc.message}") from None


def credential_plugins(document: Any) -> list[str]:
    """``user 'name' (exec: program)`` for every user entry that runs a program to get credentials."""
    found = []
    for entry in (document.get("users") or ()) if isinstance(document, dict) else ():
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        if user.get("exec"):
            command = user["exec"].get("command") if isinstance(user["exec"], dict) else None
            found.append(f"user {entry.get('name')!r} (exec: {Path(str(command or '?')).name})")
        elif user.get("auth-provider"):
            provider = user["auth-provider"].get("name") if isinstance(user["auth-provider"], dict) else None
            found.append(f"user {entry.get('name')!r} (auth-provider: {provider or '?'})")
    return found


def refuse_credential_plugins(paths: list[Path]) -> None:
    """Raise ApiConfigError when any of the kubeconfigs would run a program (no --kubeconfig-allow-exec)."""
    for path in paths:
        plugins = credential_plugins(read_kubeconfig(path))
        if plugins:
            raise ApiConfigError(f"{path}: {', '.join(plugins)} gets credentials by running a program; the exporter "
                                 "runs none unless --kubeconfig-allow-exec (GPU_POD_EXPORTER_KUBECONFIG_ALLOW_EXEC) "
                                 "is given")


def kubeconfig_endpoint(kubeconfig: str | Path) -> ApiEndpoint | None:
    """The endpoint of the kubeconfig's current context; None when only the kubernetes package can use it."""
    path = Path(kubeconfig)
    document = read_kubeconfig(path)
    if not isinstance(document, dict):
        raise ApiConfigError(f"{path}: not a kubeconfig (expected a map with 'current-context')")
    context_name = document.get("current-context")
    if not context_name:
        raise ApiConfigError(f"{path}: no 'current-context'")
    context = _named(document.get("contexts"), str(context_name), "context", path)
    cluster = _named(document.get("clusters"), str(context.get("cluster", "")), "cluster", path)
    user = _named(document.get("users"), str(context.get("user", "")), "user", path) if context.get("user") else {}
    if set(cluster) - KNOWN_CLUSTER_KEYS or set(user) - KNOWN_USER_KEYS:
        return None  # exec plugins, auth providers, proxies: the kubernetes package's loader handles them
    server = str(cluster.get("server") or "").rstrip("/")
    if urlsplit(server).scheme not in ("http", "https") or not urlsplit(server).hostname:
        raise ApiConfigError(f"{path}: cluster {context.get('cluster')!r}: 'server' must be an http(s) URL, "
                             f"got {server!r}")
    base = path.parent
    return ApiEndpoint(server=server, source=str(path), **_cluster_tls(cluster, base, path),
                       **_user_credentials(user, str(context.get("user")), base, path))


def _cluster_tls(cluster: dict[str, Any], base: Path, path: Path) -> dict[str, Any]:
    """The ``ApiEndpoint`` fields of a kubeconfig cluster entry: its CA, verification and TLS server name."""
    ca_pem = None
    ca_file = None
    if cluster.get("certificate-authority-data"):
        ca_pem = _decode_data(cluster["certificate-authority-data"], path, "certificate-authority-data").decode(
            "ascii", "replace")
    elif cluster.get("certificate-authority"):
        ca_file_path = Path(str(cluster["certificate-authority"]))
        ca_file = str(ca_file_path if ca_file_path.is_absolute() else base / ca_file_path)
    return {"ca_file": ca_file, "ca_pem": ca_pem, "verify": not bool(cluster.get("insecure-skip-tls-verify")),
            "tls_server_name": str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None}


def _user_credentials(user: dict[str, Any], name: str, base: Path, path: Path) -> dict[str, Any]:
    """The ``ApiEndpoint`` fields of a kubeconfig user entry: client certificate, token (file), basic auth."""
    cert = key = None
    if user.get("client-certificate-data") or user.get("client-certificate"):
        cert = (_decode_data(user["client-certificate-data"], path, "client-certificate-data")
                if user.get("client-certificate-data")
                else _read_file(base, user["client-certificate"], path, "client-certificate"))
        if not (user.get("client-key-data") or user.get("client-key")):
            raise ApiConfigError(f"{path}: user {name!r} has a client certificate but no client key")
        key = (_decode_data(user["client-key-data"], path, "client-key-data") if user.get("client-key-data")
               else _read_file(base, user["client-key"], path, "client-key"))
    token_file = None
    if user.get("tokenFile"):
        token_path = Path(str(user["tokenFile"]))
        token_file = str(token_path if token_path.is_absolute() else base / token_path)
    basic = (str(user["username"]), str(user.get("password", ""))) if user.get("username") else None
    return {"client_cert_pem": cert, "client_key_pem": key, "token": str(user["token"]) if user.get("token") else None,
            "token_file": token_file, "basic_auth": basic}


@contextlib.contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """PEM blobs as files readable only by us, for ``load_cert_chain``; removed right after loading."""
    paths: list[str] = []
    try:
        for content in contents:
            handle, name = tempfile.mkstemp(prefix="gpu-pod-exporter-", suffix=".pem")
            paths.append(name)
            with os.fdopen(handle, "wb") as stream:
                stream.write(content)
        yield paths
    finally:
        for name in paths:
            with contextlib.suppress(OSError):
                Path(name).unlink()


def ssl_context_for(endpoint: ApiEndpoint) -> ssl.SSLContext:
    """A client TLS context: the endpoint's CA (or the system's), its client certificate, its verification."""
    try:
        context = ssl.create_default_context(cafile=endpoint.ca_file, cadata=endpoint.ca_pem)
        if not endpoint.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if endpoint.client_cert_pem is not None and endpoint.client_key_pem is not None:
            with _private_files(endpoint.client_cert_pem, endpoint.client_key_pem) as (cert_file, key_file):
                context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ApiConfigError(f"{endpoint.source}: TLS material unusable: {exc}") from exc
    return context


class CoreV1ListMethods:
    """The request side every API transport shares: ``request(method, path, query, body=, content_type=,
    timeout=)``, ``get(path, query, timeout)`` for lists and watches, plus ``list_pod_for_all_namespaces``,
    ``list_namespace`` and ``read_namespaced_config_map`` with CoreV1Api's keyword arguments.

    ``request`` returns the urllib3 response unread (the caller parses a list with ``read_json`` or
    streams a watch) and raises ``ApiError`` for a non-2xx answer; ``timeout`` is ``(connect_s, read_s)``;
    a ``body`` is sent as JSON with ``content_type`` (JSON unless a patch type is named).
    ``user_agent`` names the exporter and its node in the API server's audit log, so an operator
    can see which node sends what (``gpu-pod-exporter/<version> node/<node>``).
    """

    user_agent = f"gpu-pod-exporter/{__version__}"

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), *, body: Any = None,
                content_type: str | None = None, timeout: Any = None) -> Any:
        raise NotImplementedError

    def get(self, path: str, query: Sequence[tuple[str, str]], timeout: Any) -> Any:
        return self.request("GET", path, query, timeout=timeout)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._get("/api/v1/pods", kwargs)

    def list_namespace(self, **kwargs: Any) -> Any:
        return self._get("/api/v1/namespaces", kwargs)

    def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> Any:
        """One ConfigMap (``-m/--configmap-data``); names are DNS labels, checked by the config parser."""
        return self._get(f"/api/v1/namespaces/{namespace}/configmaps/{name}", kwargs)

    def _get(self, path: str, kwargs: dict[str, Any]) -> Any:
        timeout, query = split_request_arguments(kwargs)
        return self.get(path, query, timeout)


class HttpLists(CoreV1ListMethods):
    """Requests over urllib3 with an ``ApiEndpoint``'s TLS settings and credentials."""

    def __init__(self, endpoint: ApiEndpoint, pool_factory: Callable[..., urllib3.PoolManager] = urllib3.PoolManager
                 ) -> None:
        self.endpoint = endpoint
        options: dict[str, Any] = {"maxsize": 4, "retries": False}
        if endpoint.server.startswith("https://"):
            options["ssl_context"] = ssl_context_for(endpoint)
            if endpoint.tls_server_name:
                options["server_hostname"] = endpoint.tls_server_name
            if not endpoint.verify:
                options["cert_reqs"] = ssl.CERT_NONE
                options["assert_hostname"] = False
        self._pool = pool_factory(**options)

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), *, body: Any = None,
                content_type: str | None = None, timeout: Any = None) -> Any:
        url = self.endpoint.server + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": JSON, "User-Agent": self.user_agent}
        authorization = self.endpoint.authorization()
        if authorization:
            headers["Authorization"] = authorization
        data = None
        if body is not None:
            data = json.dumps(body).encode()  # JSON is YAML too: an apply-patch+yaml body goes as JSON
            headers["Content-Type"] = content_type or JSON
        response = self._pool.request(method, url, body=data, headers=headers, preload_content=False,
                                      timeout=_urllib3_timeout(timeout), retries=False)
        if not 200 <= response.status <= 299:
            try:
                answer = response.read(64 * 1024)
            finally:
                response.release_conn()
            raise status_error(response.status, response.reason or "", answer,
                               retry_after_seconds(response.headers.get("Retry-After")))
        return response


def _urllib3_timeout(timeout: Any) -> urllib3.Timeout:
    """``(connect_s, read_s)`` or a total in seconds (None: urllib3's default), as the generated client reads it."""
    if isinstance(timeout, tuple):
        return urllib3.Timeout(connect=timeout[0], read=timeout[1])
    return urllib3.Timeout(total=timeout) if timeout else urllib3.Timeout()


def read_json(response: Any) -> Any:
    """The whole body of an unread response as JSON (the connection goes back to the pool);
    ``ApiError`` (status 0) when it is not JSON."""
    try:
        data = response.read()
    finally:
        with contextlib.suppress(AttributeError):
            response.release_conn()
    try:
        return json.loads(data or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(0, f"the API server answered something that is not JSON: {exc}") from None


def call_with_retries(what: str, request: Callable[[], T], policy: BackoffPolicy, *, attempts: int,
                      stop: threading.Event, random_fraction: Callable[[], float] = random.random,
                      clock: Callable[[], float] = time.monotonic) -> T:
    """``request()`` under the client's one retry policy for single calls.

    Transient failures (no answer, 429, 500, 502, 503, 504) are tried again, one attempt in each
    jittered window of ``policy`` (``exporter.backoff``; a ``Retry-After`` moves the window behind it),
    up to ``attempts`` in all, then raised as ``ApiError`` naming ``what``. A 409
    (``ApiConflictError``) and every other answer (403 RBAC, 404, 422) are raised at once: another
    attempt would get the same. ``stop`` ends the waiting (shutdown).
    """
    attempt = 0
    backoff = Backoff(policy, random_fraction)
    while True:
        try:
            return request()
        except Exception as exc:  # noqa: BLE001 - sorted right below; nothing else escapes
            error = as_api_error(exc)
        if isinstance(error, ApiConflictError) or error.status not in TRANSIENT_STATUSES | {0}:
            raise error from None
        attempt += 1
        if attempt >= attempts:
            raise ApiError(error.status, f"{what}: giving up after {attempt} attempts: {error.reason}") from None
        delay = backoff.failed(clock(), error.retry_after)
        log.debug("retrying", extra={"fields": {"call": what, "attempt": attempt, "delay_s": round(delay, 2),
                                                 "error": str(error)}})
        if stop.wait(delay):
            raise ApiError(error.status, f"{what}: stopped while retrying: {error.reason}") from None


def split_request_arguments(kwargs: Mapping[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    """CoreV1Api-style keyword arguments -> (``_request_timeout``, the API's query parameters).

    ``_preload_content`` is dropped: responses always come back unread (the caller parses a list or
    streams a watch).
    """
    query = [(QUERY_NAMES[name], _query_value(value)) for name, value in kwargs.items()
             if value is not None and name not in ("_request_timeout", "_preload_content")]
    return kwargs.get("_request_timeout"), query


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def build_lists(kubeconfig: str, *, allow_exec: bool = False) -> CoreV1ListMethods:
    """The client for this configuration: ``HttpLists`` unless only the kubernetes package can do it."""
    if not kubeconfig:
        return HttpLists(in_cluster_endpoint())
    if os.pathsep in kubeconfig:  # a KUBECONFIG list: merging files is the kubernetes package's job
        if not allow_exec:
            refuse_credential_plugins([Path(part).expanduser() for part in kubeconfig.split(os.pathsep) if part])
        return build_core_v1_api(kubeconfig)
    endpoint = kubeconfig_endpoint(Path(kubeconfig).expanduser())
    if endpoint is not None:
        return HttpLists(endpoint)
    if not allow_exec:
        refuse_credential_plugins([Path(kubeconfig).expanduser()])
    return build_core_v1_api(kubeconfig)


def build_core_v1_api(kubeconfig: str) -> CoreV1Lists:
    """The requests through the kubernetes package, for a kubeconfig only it can use.

    ``build_lists`` sends everything else itself; this path is for user entries with an ``exec``
    credential plugin or an ``auth-provider``, a cluster behind ``proxy-url``, or a ``KUBECONFIG`` list
    of files to merge (the ~30 MiB client import happens only then).

    Uses a private ``Configuration``, so nothing global in the kubernetes package changes.
    urllib3's own retries are disabled: the watch loop has its own backoff and state reporting.
    """
    from kubernetes import client, config  # noqa: PLC0415 - heavy import, only for such kubeconfigs

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig,  # type: ignore[no-untyped-call]
                            client_configuration=configuration, persist_config=False)
    configuration.retries = False
    return CoreV1Lists(client.ApiClient(configuration))


class CoreV1Lists(CoreV1ListMethods):
    """Requests through the kubernetes package's ``ApiClient``, without its generated ``CoreV1Api``.

    Why: importing the generated ``kubernetes.client.api.core_v1_api`` module builds the pydantic
    validators of all ~250 model classes its signatures mention, about 22 MiB of resident memory
    (a fifth of the exporter's footprint with ``-k``; measured by ``python -m bench``), for endpoints
    whose JSON the callers parse themselves. The requests go through the same
    ``ApiClient`` (configuration, authentication, TLS, URL building, timeouts) exactly as the
    generated methods send them with ``_preload_content=False``: the urllib3 response comes back
    unread. A non-2xx answer raises ``ApiError``, as on the urllib3 path, so every caller
    sees one error type whatever the transport. Older kubernetes releases (the older generator,
    without ``ApiClient.param_serialize``) take the same path through their ``call_api``.
    """

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), *, body: Any = None,
                content_type: str | None = None, timeout: Any = None) -> Any:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - loaded with the client

        self.api_client.user_agent = self.user_agent
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        try:
            return self._send(method, path, list(query), headers, body=body, timeout=timeout)
        except ApiException as exc:
            answer = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
            raise status_error(int(exc.status or 0), str(exc.reason or ""), answer,
                               retry_after_seconds((exc.headers or {}).get("Retry-After"))) from None

    def _send(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str], *, body: Any,
              timeout: Any) -> Any:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - loaded with the client

        if not hasattr(self.api_client, "param_serialize"):  # the older generator raises ApiException itself
            return self.api_client.call_api(path, method, query_params=query, header_params=headers, body=body,
                                            auth_settings=["BearerToken"], _preload_content=False,
                                            _return_http_data_only=True, _request_timeout=timeout)
        request = self.api_client.param_serialize(method, path, query_params=query, header_params=headers,
                                                  body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response
