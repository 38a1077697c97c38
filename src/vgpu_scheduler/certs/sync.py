"""Keep the webhook's TLS Secret and the MutatingWebhookConfiguration's caBundle in step.

Every replica's init container runs this at once, so each write is conditional and a lost race is
resolved by reading the winner's result:
* the Secret is created (409 AlreadyExists: another replica created it first) or replaced with the
  resourceVersion it was read at (409 Conflict: another replica rotated it first); either way the
  loop reads it again and finds it fresh, so all replicas end with the one Secret;
* the caBundle is written with a PUT carrying the configuration's resourceVersion, retried on 409.
A run that finds the Secret fresh and the caBundle equal writes nothing.

On rotation the new CA goes first in `ca.crt`, followed by the previous CA while it is still valid:
replicas that have not restarted yet still serve the old certificate, and the caBundle must keep
trusting it until they do.
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from vgpu_scheduler.certs import pki
from vgpu_scheduler.certs.pki import TlsMaterial
from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiError, is_already_exists, is_conflict, is_not_found

log = logging.getLogger(__name__)

Obj = dict[str, Any]

TLS_TYPE = "kubernetes.io/tls"
CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"
ATTEMPTS = 8  # conditional writes lost in a row before giving up (each loss means someone else wrote)
KEEP_CAS = 2  # the new CA and the one before it


class CertsError(RuntimeError):
    """The Secret or the webhook configuration could not be brought in step."""


@dataclass(frozen=True, slots=True)
class CertsConfig:
    namespace: str
    secret_name: str
    service_name: str
    webhook_name: str | None = None  # None: leave caBundle alone (cert-manager or a URL webhook)
    validity: timedelta = timedelta(days=365)
    rotate_before: timedelta = timedelta(days=30)
    extra_dns_names: tuple[str, ...] = ()

    def dns_names(self) -> list[str]:
        """Every name the API server may use for the Service (it uses `<svc>.<ns>.svc`)."""
        svc, ns = self.service_name, self.namespace
        names = [f"{svc}.{ns}.svc", svc, f"{svc}.{ns}", f"{svc}.{ns}.svc.cluster.local"]
        return names + [n for n in self.extra_dns_names if n not in names]


@dataclass(slots=True)
class Outcome:
    """What one run did: `secret` is created | rotated | kept, `ca_bundle` patched | unchanged |
    skipped; `lost_races` counts conditional writes another replica beat us to."""

    material: TlsMaterial
    secret: str = "kept"
    ca_bundle: str = "skipped"
    lost_races: int = 0
    files: list[str] = field(default_factory=list)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def material_of(secret: Obj) -> TlsMaterial | None:
    """The PEMs of a Secret, or None when a key is missing or not base64."""
    data = secret.get("data") or {}
    try:
        return TlsMaterial(*(base64.b64decode(data[k], validate=True) for k in (CA_KEY, CERT_KEY, KEY_KEY)))
    except (KeyError, TypeError, ValueError):
        return None


def stale_reason(material: TlsMaterial | None, cfg: CertsConfig, now: datetime) -> str | None:
    """Why this material must be replaced, or None when it is good for at least `rotate_before`."""
    if material is None:
        return "missing keys"
    try:
        info = pki.cert_info(material.cert_pem)
    except ValueError:
        return "unreadable certificate"
    if not pki.key_matches(material.cert_pem, material.key_pem):
        return "key does not match the certificate"
    if not pki.issued_by_any(material.cert_pem, material.ca_pem):
        return "certificate not signed by ca.crt"
    missing = set(cfg.dns_names()) - info.dns_names
    if missing:
        return f"no SAN for {', '.join(sorted(missing))}"
    if info.not_after - now <= cfg.rotate_before:
        return f"expires {info.not_after.isoformat()}, within {cfg.rotate_before} of now"
    return None


def _secret_body(cfg: CertsConfig, material: TlsMaterial, current: Obj | None) -> Obj:
    meta: Obj = {"name": cfg.secret_name, "namespace": cfg.namespace,
                 "labels": {"app.kubernetes.io/managed-by": "vgpu-scheduler-certs"}}
    if current is not None:
        old = current.get("metadata") or {}
        meta = {**old, "labels": {**(old.get("labels") or {}), **meta["labels"]}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,  # with the resourceVersion read: the PUT is conditional
        "type": (current or {}).get("type") or TLS_TYPE,  # a Secret's type is immutable
        "data": {CA_KEY: _b64(material.ca_pem), CERT_KEY: _b64(material.cert_pem),
                 KEY_KEY: _b64(material.key_pem)},
    }


async def ensure_secret(client: KubeClient, cfg: CertsConfig, now: datetime) -> Outcome:
    """Make the Secret hold fresh material; see the module docstring for the races."""
    lost = 0
    for _ in range(ATTEMPTS):
        try:
            current: Obj | None = await client.get(api.SECRETS, cfg.secret_name, cfg.namespace)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            current = None
        have = material_of(current) if current is not None else None
        reason = stale_reason(have, cfg, now) if current is not None else "absent"
        if reason is None and have is not None:
            return Outcome(have, "kept", lost_races=lost)
        log.info("secret %s/%s: new certificate (%s)", cfg.namespace, cfg.secret_name, reason)
        fresh = pki.issue(cfg.dns_names(), cfg.validity, now)
        if have is not None:  # keep trusting the previous CA while old replicas still serve its cert
            previous = pki.live_cas(have.ca_pem, now, KEEP_CAS - 1)
            fresh = TlsMaterial(b"".join([fresh.ca_pem, *previous]), fresh.cert_pem, fresh.key_pem)
        body = _secret_body(cfg, fresh, current)
        try:
            if current is None:
                await client.create(api.SECRETS, body, cfg.namespace)
                return Outcome(fresh, "created", lost_races=lost)
            await client.replace(api.SECRETS, cfg.secret_name, body, cfg.namespace)
            return Outcome(fresh, "rotated", lost_races=lost)
        except ApiError as exc:
            if not (is_already_exists(exc) or is_conflict(exc)):
                raise
            lost += 1  # another replica wrote first: read its Secret
    raise CertsError(f"secret {cfg.namespace}/{cfg.secret_name}: {ATTEMPTS} conditional writes lost in a row")


async def ensure_ca_bundle(client: KubeClient, webhook_name: str, ca_pem: bytes) -> str:
    """Set every webhook's clientConfig.caBundle of the configuration; 'patched' or 'unchanged'."""
    want = _b64(ca_pem)
    for _ in range(ATTEMPTS):
        try:
            mwc = await client.get(api.MUTATING_WEBHOOK_CONFIGURATIONS, webhook_name)
        except ApiError as exc:
            if is_not_found(exc):
                raise CertsError(f"mutatingwebhookconfiguration {webhook_name!r} not found") from exc
            raise
        webhooks = mwc.get("webhooks") or []
        if not webhooks:
            raise CertsError(f"mutatingwebhookconfiguration {webhook_name!r} has no webhooks")
        if all((w.get("clientConfig") or {}).get("caBundle") == want for w in webhooks):
            return "unchanged"
        for w in webhooks:
            w.setdefault("clientConfig", {})["caBundle"] = want
        try:
            await client.replace(api.MUTATING_WEBHOOK_CONFIGURATIONS, webhook_name, mwc)
            return "patched"
        except ApiError as exc:
            if not is_conflict(exc):
                raise
    raise CertsError(f"mutatingwebhookconfiguration {webhook_name!r}: {ATTEMPTS} updates lost in a row")


def write_files(directory: Path, material: TlsMaterial) -> list[str]:
    """Write ca.crt, tls.crt and tls.key (0600) into `directory`, each only if it differs, each by
    rename so a server reloading them never reads half a file. Returns the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in ((CA_KEY, material.ca_pem), (CERT_KEY, material.cert_pem), (KEY_KEY, material.key_pem)):
        path = directory / name
        if path.is_file() and path.read_bytes() == data:
            continue
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o600 if name == KEY_KEY else 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(name)
    return written


async def sync(client: KubeClient, cfg: CertsConfig, now: datetime, write_dir: Path | None = None) -> Outcome:
    """The whole run: Secret, then caBundle (from the Secret as it ends up), then local files."""
    outcome = await ensure_secret(client, cfg, now)
    if cfg.webhook_name:
        outcome.ca_bundle = await ensure_ca_bundle(client, cfg.webhook_name, outcome.material.ca_pem)
    if write_dir is not None:
        outcome.files = write_files(write_dir, outcome.material)
    return outcome
