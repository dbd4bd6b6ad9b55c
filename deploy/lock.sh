#!/usr/bin/env bash
# Regenerate deploy/requirements.lock (the image's pinned, hashed dependencies) from pyproject.toml:
#     deploy/lock.sh
# Run it after changing [project] dependencies. It uses pip-tools in a throwaway venv and ignores the
# machine's pip configuration (local wheel folders would leak into the lock); set PIP_INDEX_URL to lock
# against a mirror. The lock includes setuptools, the build backend, for the image's offline JCT install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${JCT_DEPLOY_CACHE:-/var/tmp/jct-deploy-cache}/lock-venv
if [ ! -x "$VENV/bin/pip-compile" ]; then
    python3 -m venv "$VENV"
    PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install --quiet pip-tools
fi
PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND=deploy/lock.sh "$VENV/bin/pip-compile" --quiet \
    --generate-hashes --allow-unsafe --build-deps-for wheel --strip-extras \
    --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
    --output-file deploy/requirements.lock pyproject.toml
echo "wrote deploy/requirements.lock"
