# Container image for vgpu-scheduler. Build from the repository root:
#   docker build -t vgpu-scheduler .
# The package is installed from this repository (a wheel built in the first stage), so the runtime
# image holds no sources and no build tools.
#
# HAMi's Helm chart starts the extender container with the command `scheduler`, so the image
# provides that name too: swapping the image of `vgpu-scheduler-extender` is the whole change.
# It runs as an unprivileged user. Our manifests (deploy/) listen on 8443; the chart binds 443,
# which a non-root process may do on runtimes that open low ports to containers (Docker >= 20.10
# and containerd 2 set net.ipv4.ip_unprivileged_port_start=0); see docs/deploy.md.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl \
 && rm -rf /wheels \
 && ln -s /usr/local/bin/vgpu-scheduler /usr/local/bin/scheduler \
 && groupadd --system --gid 65532 vgpu \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin vgpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /
EXPOSE 8443 9395
ENTRYPOINT ["vgpu-scheduler"]
