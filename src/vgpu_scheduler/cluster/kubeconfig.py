"""Where the API server is and how to authenticate: kubeconfig or in-cluster service account.

Order (HAMi §1.4): `--kubeconfig`, else $KUBECONFIG (a `:`-separated list is merged), else
~/.kube/config if it exists, else the in-cluster service account. kubernetes_asyncio.config does
the parsing, certificate data, exec plugins and token files; we only turn its Configuration into
an SSLContext and an Authorization header that is refreshed from its source.
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.transport import AuthProvider, HttpTransport

log = logging.getLogger(__name__)

SERVICE_TOKEN_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CERT_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


class KubeconfigError(Exception):
    """No usable cluster configuration (bad kubeconfig, or not in a cluster)."""


@dataclass
class ConnectionSettings:
    base_url: str
    ssl_context: ssl.SSLContext | None
    server_hostname: str | None
    auth: AuthProvider | None
    source: str  # "kubeconfig:<path>" or "in-cluster", for logs


class KubeconfigAuth:
    """Bearer/basic header from a kubeconfig user. Re-loaded every `interval` seconds (a `tokenFile`
    is re-read, an exec plugin re-run once its credential expires) and right after a 401."""

    def __init__(
        self, loader: Any, configuration: Any, interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._loader = loader
        self._cfg = configuration
        self._interval = interval
        self._clock = clock
        self._loaded_at = clock()

    async def authorization(self) -> str | None:
        if self._clock() - self._loaded_at >= self._interval:
            await self._reload()
        return _bearer(self._cfg)

    async def invalidate(self) -> None:
        # The loader skips the exec plugin while its credential looks unexpired; a 401 says otherwise.
        if hasattr(self._loader, "exec_plugin_expiry"):
            del self._loader.exec_plugin_expiry
        await self._reload()

    async def _reload(self) -> None:
        try:
            await self._loader.load_and_set(self._cfg)
        except Exception as exc:  # keep the last good credential; the API will say 401 if it is stale
            log.warning("kubeconfig: refreshing credentials failed: %s", exc)
        self._loaded_at = self._clock()


class InClusterAuth:
    """Service account token; kubernetes_asyncio re-reads the projected token file once a minute
    (its refresh hook), and we force a re-read after a 401."""

    def __init__(self, loader: Any, configuration: Any) -> None:
        self._loader = loader
        self._cfg = configuration

    async def authorization(self) -> str | None:
        hook = self._cfg.refresh_api_key_hook
        if hook is not None:
            hook(self._cfg)
        return _bearer(self._cfg)

    async def invalidate(self) -> None:
        self._loader.token_expires_at = datetime.datetime.min


def _bearer(cfg: Any) -> str | None:
    value = cfg.api_key.get("BearerToken") if isinstance(cfg.api_key, dict) else None
    return value if isinstance(value, str) and value else None


def ssl_context_for(cfg: Any) -> ssl.SSLContext | None:
    """The client SSLContext a kubernetes_asyncio Configuration describes (None for plain http)."""
    if not str(cfg.host).startswith("https"):
        return None
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def resolve_kubeconfig_path(
    kubeconfig: str | None, environ: Mapping[str, str], home: str | None = None
) -> str | None:
    """The kubeconfig to use, or None for in-cluster."""
    if kubeconfig:
        return kubeconfig
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    default = Path(home or os.path.expanduser("~")) / ".kube" / "config"
    return str(default) if default.is_file() else None


async def load_settings(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | None = None,
    token_refresh_interval: float = 60.0,
    incluster_token_path: str = SERVICE_TOKEN_FILENAME,
    incluster_ca_path: str = SERVICE_CERT_FILENAME,
) -> ConnectionSettings:
    # Imported here: kubernetes_asyncio.client takes ~1 s to import and only this path needs it.
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import ConfigException, load_kube_config
    from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

    env = os.environ if environ is None else environ
    path = resolve_kubeconfig_path(kubeconfig, env, home)
    cfg = Configuration()
    auth: AuthProvider
    try:
        if path is not None:
            loader = await load_kube_config(
                config_file=path, context=context, client_configuration=cfg, persist_config=False
            )
            auth = KubeconfigAuth(loader, cfg, token_refresh_interval)
            source = f"kubeconfig:{path}"
        else:
            incluster = InClusterConfigLoader(
                incluster_token_path, incluster_ca_path, try_refresh_token=True, environ=dict(env)
            )
            incluster.load_and_set(cfg)
            auth = InClusterAuth(incluster, cfg)
            source = "in-cluster"
    except (ConfigException, OSError, KeyError, TypeError, ValueError, AssertionError) as exc:
        where = path or "in-cluster service account"
        raise KubeconfigError(f"cannot load cluster configuration from {where}: {exc}") from exc
    try:
        ctx = ssl_context_for(cfg)
    except (OSError, ssl.SSLError) as exc:
        raise KubeconfigError(f"cannot load TLS files from {source}: {exc}") from exc
    return ConnectionSettings(
        base_url=str(cfg.host).rstrip("/"),
        ssl_context=ctx,
        server_hostname=getattr(cfg, "tls_server_name", None) or None,
        auth=auth,
        source=source,
    )


async def make_transport(
    kubeconfig: str | None = None,
    *,
    qps: float = 5.0,
    burst: int = 10,
    timeout: float = 0.0,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: str | None = None,
    token_refresh_interval: float = 60.0,
    incluster_token_path: str = SERVICE_TOKEN_FILENAME,
    incluster_ca_path: str = SERVICE_CERT_FILENAME,
    user_agent: str = "vgpu-scheduler",
) -> HttpTransport:
    """An HttpTransport for `--kubeconfig`/$KUBECONFIG/~/.kube/config/in-cluster, with client-go
    style rate limiting (`--kube-qps`, `--kube-burst`) and request timeout (`--kube-timeout`)."""
    s = await load_settings(
        kubeconfig,
        context=context,
        environ=environ,
        home=home,
        token_refresh_interval=token_refresh_interval,
        incluster_token_path=incluster_token_path,
        incluster_ca_path=incluster_ca_path,
    )
    log.info("kubernetes API at %s (%s)", s.base_url, s.source)
    return HttpTransport(
        s.base_url,
        ssl_context=s.ssl_context,
        auth=s.auth,
        qps=qps,
        burst=burst,
        timeout=timeout,
        server_hostname=s.server_hostname,
        user_agent=user_agent,
    )


async def make_client(kubeconfig: str | None = None, **kwargs: Any) -> KubeClient:
    """KubeClient over `make_transport(kubeconfig, **kwargs)`."""
    return KubeClient(await make_transport(kubeconfig, **kwargs))
