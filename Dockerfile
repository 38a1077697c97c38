# Container image for vgpu-scheduler. Build from the repository root:
#   docker build -t vgpu-scheduler .
# The package is installed from this repository (a wheel built in the first stage), so the runtime
# image holds no sources and no build tools.
#
# HAMi's Helm chart starts the extender container with the command `scheduler` and
# --http_bind=0.0.0.0:443 (80 without its webhook), with no securityContext; so the image provides
# that command too, and binds those ports as its non-root user: the interpreter the entry points run
# on carries the file capability cap_net_bind_service (nothing else). Swapping the image of HAMi's
# `vgpu-scheduler-extender` is then the whole change (docs/deploy.md).
# A container must keep NET_BIND_SERVICE in its bounding set (the runtimes' default does): with
# `capabilities: {drop: [ALL]}` and no `add: [NET_BIND_SERVICE]` the kernel refuses to start an
# executable whose file capabilities it cannot grant ("operation not permitted"). Under
# allowPrivilegeEscalation: false (no_new_privs) the capability is not granted; a port below 1024
# then needs the pod sysctl net.ipv4.ip_unprivileged_port_start, as our chart sets.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
# The capability goes on the real file (not a symlink) behind the entry point's `#!` line, so it is
# the interpreter `vgpu-scheduler` and `scheduler` actually run; setcap comes from libcap2-bin,
# removed again in the same layer.
RUN pip install --no-cache-dir /wheels/*.whl \
 && rm -rf /wheels \
 && ln -s /usr/local/bin/vgpu-scheduler /usr/local/bin/scheduler \
 && apt-get update \
 && apt-get install -y --no-install-recommends libcap2-bin \
 && interpreter="$(readlink -f "$(sed -n '1s/^#!//p' /usr/local/bin/vgpu-scheduler)")" \
 && case "$interpreter" in */python3*) ;; *) echo "not an interpreter: $interpreter" >&2; exit 1 ;; esac \
 && setcap cap_net_bind_service=+ep "$interpreter" \
 && getcap "$interpreter" | grep -q cap_net_bind_service \
 && apt-get purge -y --auto-remove libcap2-bin \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 vgpu \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin vgpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /
# 443/80: the extender under HAMi's chart or ours (--http_bind); 9395: metrics.
EXPOSE 443 80 9395
ENTRYPOINT ["vgpu-scheduler"]
