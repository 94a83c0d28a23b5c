# Shared by the tools/ scripts: the controller virtualenv and the node image.
# shellcheck shell=bash
DGXSPARK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DGXSPARK_VENV=${DGXSPARK_VENV:-$DGXSPARK_ROOT/.venv}

# Create (or refresh after requirements-dev.txt changed) the pinned toolchain.
dgxspark_venv() {
  local stamp="$DGXSPARK_VENV/.requirements.sha256"
  local want
  want=$(sha256sum "$DGXSPARK_ROOT/requirements-dev.txt" | cut -d' ' -f1)
  if [ ! -x "$DGXSPARK_VENV/bin/ansible-playbook" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "tools: installing the controller toolchain into $DGXSPARK_VENV" >&2
    python3 -m venv "$DGXSPARK_VENV"
    "$DGXSPARK_VENV/bin/pip" install --quiet --upgrade pip
    "$DGXSPARK_VENV/bin/pip" install --quiet -r "$DGXSPARK_ROOT/requirements-dev.txt"
    echo "$want" > "$stamp"
  fi
  export PATH="$DGXSPARK_VENV/bin:$PATH"
  export ANSIBLE_CONFIG="$DGXSPARK_ROOT/ansible.cfg"
}

dgxspark_require_docker() {
  if ! docker info >/dev/null 2>&1; then
    echo "tools: no Docker daemon answers; start dockerd (see README, Prerequisites)" >&2
    exit 1
  fi
}

# The node image, and what the simulated cluster's engine needs (the vLLM CPU
# runtime, the tiny model, the engine image stand-ins): each is built once and
# reused while its inputs are unchanged.
dgxspark_node_image() {
  DGXSPARK_NODE_IMAGE=$("$DGXSPARK_ROOT/tools/node-image")
  export DGXSPARK_NODE_IMAGE
  "$DGXSPARK_ROOT/tools/sim-assets" all
}
