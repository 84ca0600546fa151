# fastverify image: the SGLang server image + fastverify (supervisor daemon, exporter, CLI)
# with the NCCL profiles baked in as env files under /etc/fastverify/profiles.
#
#   docker build --build-arg VERSION=0.1.0 -t fastverify:0.1.0 .
#       (VERSION: the image's version label; deploy.sh passes fastverify/__init__.py's)
#   docker build --build-arg BASE_IMAGE=my/base:tag --build-arg PIP_OPTIONS="--no-index
#       --find-links /src/.whl" -t fastverify:test .      # offline build on another base
#
# The base must provide python3 (>= 3.11) with pip importable; the lmsysorg/sglang images
# do. fastverify goes into its own virtual environment that sees the base's
# site-packages (so the daemon's interpreter can import sglang) without changing any
# package the base installed. No sitecustomize.py: the daemon sets NCCL_* per start.
# Another SGLang release (fastverify supports 0.5.1 .. 0.5.23: `fastverifyctl sglang versions`,
# README "Supported SGLang versions"): --build-arg BASE_IMAGE=lmsysorg/sglang:v<release>-cuXXX,
# e.g. lmsysorg/sglang:v0.5.20-cu129 (the CUDA suffixes published differ per release). The
# daemon reads the image's SGLang version at start and loads that release's facts.
ARG BASE_IMAGE=lmsysorg/sglang:v0.5.23-cu129

# The NCCL tuner plugin (native/tuner): plain C, built with the base image's system
# compiler so it links against the same glibc the runtime has; no CUDA or NCCL headers.
# The lmsysorg/sglang images have gcc; a base without a C compiler gets an image without
# the plugin (said loudly here; `fastverifyctl doctor` and tuner-profile validation say so).
FROM ${BASE_IMAGE} AS tuner
COPY native/tuner /src/native/tuner
COPY scripts/build-tuner.sh /src/scripts/build-tuner.sh
RUN mkdir -p /out \
 && if command -v cc >/dev/null 2>&1; then \
      /src/scripts/build-tuner.sh --out /out/libnccl-tuner-fastverify.so; \
    else \
      echo "WARNING: no C compiler (cc) in the base image: no NCCL tuner plugin in this image" >&2; \
    fi

FROM ${BASE_IMAGE} AS build
# Extra pip options, e.g. an offline wheelhouse inside the build context (tests use this).
ARG PIP_OPTIONS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
COPY . /src
# Build the wheel (hatchling, in an isolated build environment), then install it with its
# dependencies into the venv that the runtime stage copies.
# hadolint ignore=SC2086
RUN python3 -m pip wheel ${PIP_OPTIONS} --no-deps --wheel-dir /dist /src \
 && python3 -m venv --system-site-packages --without-pip /opt/fastverify \
 && /opt/fastverify/bin/python -m pip install ${PIP_OPTIONS} /dist/fastverify-*.whl \
 && /opt/fastverify/bin/fastverifyctl --version

FROM ${BASE_IMAGE}
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="fastverify" \
      org.opencontainers.image.description="SGLang server supervised by fastverifyd: NCCL tuning profiles, verified switches with rollback, Prometheus exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=build /opt/fastverify /opt/fastverify
# fastverify.tuner.plugin.find_plugin() looks here; tuner profiles set NCCL_TUNER_PLUGIN to it.
COPY --from=tuner /out/ /usr/local/lib/fastverify/
COPY compose/fastverifyd.container.toml /etc/fastverify/fastverifyd.toml

ENV PATH=/opt/fastverify/bin:${PATH} \
    FASTVERIFY_CONFIG=/etc/fastverify/fastverifyd.toml \
    FASTVERIFY_SOCKET=/run/fastverify/control.sock \
    PYTHONUNBUFFERED=1

# /run/fastverify is bind-mounted from the host so that the host's fastverifyctl reaches
# the control socket; /var/lib/fastverify holds state.json and the switch journal, and
# FlashInfer's PCIe-IPC autotune cache and JIT workspace (the daemon points
# FLASHINFER_AUTOTUNE_DIR and FLASHINFER_WORKSPACE_BASE at flashinfer/ in it), so the
# tactics measured at the first start survive the container.
# The shipped profiles (env files inside the package) are baked at /etc/fastverify/profiles;
# the host's override directory is mounted at /etc/fastverify/profiles.d.
RUN mkdir -p /run/fastverify /var/lib/fastverify /etc/fastverify/profiles.d \
 && ln -s "$(/opt/fastverify/bin/python -c 'from fastverify import paths; print(paths.shipped_profile_dir())')" \
      /etc/fastverify/profiles \
 && ls /etc/fastverify/profiles/*.env
VOLUME ["/var/lib/fastverify"]

# FlashInfer's PCIe-IPC all-reduce (the pcie-ipc profile): its wheel ships no prebuilt
# pcie_ipc_comm, so the first start JIT-compiles it with nvcc and ninja (10.6-13 s on one
# H200, plus 7 s for the autotuner's trtllm_utils) into the state volume, where later
# starts find it. The lmsysorg/sglang images have both; a base without them gets an image
# whose pcie-ipc profile serves with NCCL unless a JIT cache is installed (said here, and
# by `fastverifyctl doctor`).
RUN if command -v nvcc >/dev/null 2>&1 \
      && { command -v ninja >/dev/null 2>&1 || python3 -c 'import ninja' 2>/dev/null; }; then \
      echo "FlashInfer JIT: nvcc and ninja present"; \
    else \
      echo "WARNING: no nvcc/ninja in the base image: FlashInfer cannot JIT-compile pcie_ipc_comm (the pcie-ipc profile falls back to NCCL unless flashinfer-jit-cache is installed)" >&2; \
    fi

# 30000: SGLang HTTP API and its /metrics; 9464: fastverify exporter.
EXPOSE 30000 9464
STOPSIGNAL SIGTERM
# Healthy while the daemon answers and serves (or is switching); a failed daemon is not.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30m --retries=3 \
  CMD ["/opt/fastverify/bin/python", "-c", "import sys; from fastverify.client import ControlClient as C; s = C(timeout=4).get('/v1/status'); sys.exit(0 if s.get('state') == 'READY' or s.get('switch_in_flight') else 1)"]

ENTRYPOINT ["/opt/fastverify/bin/fastverifyd"]
CMD ["--config", "/etc/fastverify/fastverifyd.toml"]
