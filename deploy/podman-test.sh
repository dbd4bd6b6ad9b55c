#!/usr/bin/env bash
# The deployment test for machines WITHOUT registry access: no Docker engine, no image pulls.
# Run by `make deploy-test` (and so by .ci/run). Needs root, Debian's package archive (apt-get, debootstrap)
# and PyPI (pip inside the image build); PostgreSQL on 127.0.0.1:5432 (user postgres, trust).
#
#   1. installs podman, runc, debootstrap and nginx from Debian when missing;
#   2. makes a base image without a registry: debootstrap a minimal bookworm with python3, `podman import`
#      it (cached: the image tag, and the rootfs tarball under $JCT_DEPLOY_CACHE);
#   3. builds deploy/Dockerfile with BASE_IMAGE=that image, the machine's CA bundle as the `ca` secret
#      and the machine's non-local pip index settings as the `pipconf` secret;
#   4. starts two JCT containers (JCT_REPLICA=jct1, jct2; host network, loopback ports, one shared
#      /data volume) at once on a fresh PostgreSQL database, and nginx on the host running
#      deploy/nginx.conf with only the upstream addresses, the listen port and the log paths replaced;
#   5. runs deploy/e2e.py through nginx (see its docstring), which stops jct2 with SIGTERM mid-run;
#   6. checks jct2 drained and exited 0, `podman-compose config` accepts deploy/compose.yaml, and
#      leaves nothing behind (containers, volume, nginx, database; a trap does it on any exit).
#
# Environment: JCT_DEPLOY_CACHE (default /var/tmp/jct-deploy-cache), JCT_DEPLOY_PG (default
# postgresql://postgres@127.0.0.1:5432), JCT_DEPLOY_REBUILD_BASE=1 to remake the base image.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
CACHE=${JCT_DEPLOY_CACHE:-/var/tmp/jct-deploy-cache}
PG=${JCT_DEPLOY_PG:-postgresql://postgres@127.0.0.1:5432}
BASE_IMAGE=localhost/jct-base:bookworm
IMAGE=localhost/jct:deploy-test
TAG=jct-deploy-$$
DB=jct_deploy_$$
VOLUME=$TAG-data
WORK=$(mktemp -d /tmp/jct-deploy.XXXXXX)
NGINX_PID=
FAILURES=()
export CONTAINERS_CONF=$ROOT/deploy/containers.conf

say() { printf '== [%4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
fail() { FAILURES+=("$1"); printf 'FAIL %s\n' "$1"; }

psql_admin() { psql "$PG/postgres" -v ON_ERROR_STOP=1 -qAt -c "$1"; }

cleanup() {
    local status=$?
    set +e
    say "cleanup"
    if [ -n "$NGINX_PID" ] && kill -0 "$NGINX_PID" 2>/dev/null; then
        kill -QUIT "$NGINX_PID"
        for _ in $(seq 1 50); do kill -0 "$NGINX_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$NGINX_PID" 2>/dev/null
    fi
    for name in "$TAG-jct1" "$TAG-jct2"; do
        if podman container exists "$name"; then
            if [ "$status" -ne 0 ]; then
                echo "--- last log lines of $name"
                podman logs --tail 25 "$name" 2>&1 | sed 's/^/    /'
            fi
            podman rm --force --time 5 "$name" >/dev/null 2>&1
        fi
    done
    podman volume exists "$VOLUME" && podman volume rm --force "$VOLUME" >/dev/null
    psql_admin "DROP DATABASE IF EXISTS $DB WITH (FORCE)" 2>/dev/null
    if [ "$status" -ne 0 ] && [ -s "$WORK/nginx-error.log" ]; then
        echo "--- nginx error log"; tail -n 20 "$WORK/nginx-error.log" | sed 's/^/    /'
    fi
    rm -rf "$WORK"
    say "done in $(($(date +%s) - START))s"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# --- 1. tools ---------------------------------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
    echo "deploy test: run as root (podman, debootstrap and apt-get need it)" >&2
    exit 2
fi
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v conmon >/dev/null || missing+=(conmon)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v nginx >/dev/null || missing+=(nginx-light)
command -v psql >/dev/null || missing+=(postgresql-client)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} from Debian"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    echo "deploy test: no .venv; run 'make .venv/.installed' (make deploy-test does)" >&2
    exit 2
fi
pg_isready -d "$PG/postgres" -q || { echo "deploy test: PostgreSQL at $PG is not answering" >&2; exit 2; }

# runc cannot raise limits above the machine's hard limits: lower containers.conf's when they are lower.
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
want=16384
for hard in "$hard_nofile" "$hard_nproc"; do
    if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then want=$hard; fi
done
if [ "$want" -lt 16384 ]; then
    sed "s/=16384:16384/=$want:$want/g" deploy/containers.conf > "$WORK/containers.conf"
    export CONTAINERS_CONF=$WORK/containers.conf
fi

# --- 2. base image ----------------------------------------------------------------------------------
mkdir -p "$CACHE"
if [ "${JCT_DEPLOY_REBUILD_BASE:-0}" = 1 ]; then
    podman rmi --force "$BASE_IMAGE" >/dev/null 2>&1 || true
    rm -f "$CACHE/bookworm-python3.tar"
fi
if ! podman image exists "$BASE_IMAGE"; then
    if [ ! -s "$CACHE/bookworm-python3.tar" ]; then
        say "debootstrap: a minimal bookworm with python3 (first run only)"
        rm -rf "$CACHE/rootfs"
        debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
            bookworm "$CACHE/rootfs" > "$CACHE/debootstrap.log" 2>&1 \
            || { tail -n 20 "$CACHE/debootstrap.log"; exit 1; }
        rm -rf "$CACHE"/rootfs/var/cache/apt/archives/*.deb "$CACHE"/rootfs/var/lib/apt/lists/* \
            "$CACHE"/rootfs/usr/share/doc/* "$CACHE"/rootfs/usr/share/man/*
        tar --numeric-owner -C "$CACHE/rootfs" -cf "$CACHE/bookworm-python3.tar.tmp" .
        mv "$CACHE/bookworm-python3.tar.tmp" "$CACHE/bookworm-python3.tar"
        rm -rf "$CACHE/rootfs"
    fi
    say "podman import $BASE_IMAGE"
    podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/usr/bin/python3"]' \
        "$CACHE/bookworm-python3.tar" "$BASE_IMAGE" >/dev/null
else
    say "base image $BASE_IMAGE exists (JCT_DEPLOY_REBUILD_BASE=1 remakes it)"
fi

# --- 3. the image -----------------------------------------------------------------------------------
secrets=()
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] && secrets+=(--secret "id=ca,src=$ca")
# The index pip uses here, minus anything local (file:// indexes and find-links do not exist in the build).
pip_index=$(.venv/bin/python -m pip config get global.index-url 2>/dev/null || true)
pip_index=${PIP_INDEX_URL:-$pip_index}
pip_extra=$(.venv/bin/python -m pip config get global.extra-index-url 2>/dev/null || true)
pip_extra=${PIP_EXTRA_INDEX_URL:-$pip_extra}
pip_extra=$(tr ' ' '\n' <<< "$pip_extra" | grep -v -e '^file:' -e '^$' | tr '\n' ' ' || true)
if [ -n "$pip_index" ] && [[ "$pip_index" != file:* ]] || [ -n "${pip_extra// /}" ]; then
    {
        echo "[global]"
        [ -n "$pip_index" ] && [[ "$pip_index" != file:* ]] && echo "index-url = $pip_index"
        [ -n "${pip_extra// /}" ] && echo "extra-index-url = $pip_extra"
    } > "$WORK/pip.conf"
    secrets+=(--secret "id=pipconf,src=$WORK/pip.conf")
fi
say "podman build $IMAGE (BASE_IMAGE=$BASE_IMAGE)"
previous=$(podman image inspect "$IMAGE" --format '{{.Id}}' 2>/dev/null || true)
if ! podman build --network=host --format docker --build-arg "BASE_IMAGE=$BASE_IMAGE" "${secrets[@]}" \
    -f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore -t "$IMAGE" . > "$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log"
    fail "image build"
    exit 1
fi
say "image $(podman image inspect "$IMAGE" --format '{{.Id}}' | cut -c1-12), $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"
[ "$(podman image inspect "$IMAGE" --format '{{.Config.User}}')" = "10001:10001" ] || fail "image user is not 10001"
# Keep the disk from filling with superseded images; build-cache layers younger than a day stay.
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect "$IMAGE" --format '{{.Id}}')" ]; then
    podman rmi "$previous" >/dev/null 2>&1 || true
fi
podman image prune --force --filter until=24h >/dev/null 2>&1 || true

# --- 4. two replicas and nginx ----------------------------------------------------------------------
psql_admin "CREATE DATABASE $DB"
DATABASE_URL="$PG/$DB"
podman volume create "$VOLUME" >/dev/null
P1=$(free_port); P2=$(free_port); PN=$(free_port)
while [ "$P2" = "$P1" ]; do P2=$(free_port); done
while [ "$PN" = "$P1" ] || [ "$PN" = "$P2" ]; do PN=$(free_port); done

# A remote the replicas may write (DESIGN 16): a bare repository with one commit, owned by the image's user.
mkdir -p "$WORK/remote"
git init --quiet --bare --initial-branch=main "$WORK/remote/app.git"
git init --quiet --initial-branch=main "$WORK/seed"
echo "app" > "$WORK/seed/README.md"
git -C "$WORK/seed" add README.md
git -C "$WORK/seed" -c user.name=seed -c user.email=seed@example.com commit --quiet -m "first"
git -C "$WORK/seed" push --quiet "$WORK/remote/app.git" main
chown -R 10001:10001 "$WORK/remote"

# JCT_AUTO_REWORK=false: e2e.py's lifecycle leaves a partial verdict for a reviewer, and its crowds complete
# without citing evidence; each task is meant to end once.
start_replica() {  # name port
    podman run --detach --name "$TAG-$1" --network=host --volume "$VOLUME:/data" \
        --volume "$WORK/remote:/remote" \
        --env JCT_REPOS=deploy/=file:///remote --env JCT_REPOS_WRITABLE=deploy/ \
        --health-interval=disable \
        --env JCT_DATABASE_URL="$DATABASE_URL" \
        --env JCT_REPLICA="$1" \
        --env JCT_HOST=127.0.0.1 --env JCT_PORT="$2" \
        --env JCT_LEASE_SECONDS=15 --env JCT_SWEEP_INTERVAL_SECONDS=1 --env JCT_MAX_ATTEMPTS=20 \
        --env JCT_RATE_LIMIT_PER_MINUTE=1000000 --env JCT_SHUTDOWN_GRACE_SECONDS=10 \
        --env JCT_LOG_LEVEL=INFO \
        --env JCT_AUTO_REWORK=false \
        "$IMAGE" >/dev/null
}
say "starting jct1 (:$P1) and jct2 (:$P2) at once on a fresh database (migrations under an advisory lock)"
start_replica jct1 "$P1" &
start_replica jct2 "$P2" &
wait
ready() { python3 -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$1/readyz', timeout=2)" 2>/dev/null; }
for name_port in "jct1:$P1" "jct2:$P2"; do
    name=${name_port%%:*}; port=${name_port#*:}
    for _ in $(seq 1 120); do
        ready "$port" && break
        [ "$(podman inspect "$TAG-$name" --format '{{.State.Running}}')" = true ] || break
        sleep 0.5
    done
    if ! ready "$port"; then fail "$name did not become ready"; exit 1; fi
done
if podman healthcheck run "$TAG-jct1" >/dev/null 2>&1; then
    echo "PASS image HEALTHCHECK (/healthz) on jct1"
else
    fail "image HEALTHCHECK on jct1"
fi
revision=$(psql "$DATABASE_URL" -qAt -c "SELECT version_num FROM alembic_version")
say "both ready; database at revision $revision"

# nginx: deploy/nginx.conf with the compose service addresses replaced by loopback ports.
sed -e "s/\bjct1:8765\b/127.0.0.1:$P1/g" \
    -e "s/\bjct2:8765\b/127.0.0.1:$P2/g" \
    -e "s/^\(\s*\)listen 80;/\1listen 127.0.0.1:$PN;/" \
    -e "s#/var/log/nginx/access.log#$WORK/nginx-access.log#" \
    deploy/nginx.conf > "$WORK/nginx.conf"
echo "--- nginx.conf as run here (diff against deploy/nginx.conf):"
diff deploy/nginx.conf "$WORK/nginx.conf" | sed 's/^/    /' || true
nginx -t -q -p "$WORK" -c "$WORK/nginx.conf" -g "pid $WORK/nginx.pid; error_log $WORK/nginx-error.log;"
nginx -p "$WORK" -c "$WORK/nginx.conf" -g "daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx-error.log;" &
NGINX_PID=$!
for _ in $(seq 1 50); do ready "$PN" && break; sleep 0.1; done
ready "$PN" || { fail "nginx did not answer on :$PN"; exit 1; }
say "nginx on :$PN"

# --- 5. end to end through nginx --------------------------------------------------------------------
say "e2e.py"
if ! .venv/bin/python deploy/e2e.py --url "http://127.0.0.1:$PN" --database-url "$DATABASE_URL" \
    --replica "jct1=127.0.0.1:$P1" --replica "jct2=127.0.0.1:$P2" --access-log "$WORK/nginx-access.log" \
    --stop-replica-command "podman stop --time 25 $TAG-jct2" --run-tag "$TAG" --remote "$WORK/remote"; then
    fail "e2e.py"
fi

# --- 6. after the stop ------------------------------------------------------------------------------
state=$(podman inspect "$TAG-jct2" --format '{{.State.Status}} {{.State.ExitCode}}')
if [ "$state" = "exited 0" ]; then
    echo "PASS jct2 drained on SIGTERM and exited 0"
else
    fail "jct2 after SIGTERM: $state (want exited 0; 137 means it was killed after the grace period)"
fi
podman logs "$TAG-jct2" 2>&1 | grep -i -E 'drain|shutdown|stopp' | tail -n 5 | sed 's/^/    jct2: /' || true
if ready "$P1"; then echo "PASS jct1 still ready"; else fail "jct1 not ready after jct2 stopped"; fi

say "podman-compose config"
COMPOSE_VENV=$CACHE/compose-venv
if [ ! -x "$COMPOSE_VENV/bin/podman-compose" ]; then
    python3 -m venv "$COMPOSE_VENV"
    "$COMPOSE_VENV/bin/pip" install --quiet podman-compose==1.6.0
fi
services_missing=()
compose_ok=0
if POSTGRES_PASSWORD=example "$COMPOSE_VENV/bin/podman-compose" -f deploy/compose.yaml config \
    > "$WORK/compose.out" 2>&1; then
    compose_ok=1
    for service in postgres jct1 jct2 nginx; do
        grep -q "^  $service:\$" "$WORK/compose.out" || services_missing+=("$service")
    done
fi
if [ "$compose_ok" = 1 ] && [ ${#services_missing[@]} -eq 0 ]; then
    echo "PASS podman-compose config accepts deploy/compose.yaml (postgres, jct1, jct2, nginx)"
else
    sed 's/^/    /' "$WORK/compose.out" | tail -n 20
    fail "podman-compose config (missing: ${services_missing[*]:-see above})"
fi

echo
if [ ${#FAILURES[@]} -eq 0 ]; then
    echo "deploy test: PASS in $(($(date +%s) - START))s"
else
    echo "deploy test: FAIL (${FAILURES[*]}) in $(($(date +%s) - START))s"
    exit 1
fi
