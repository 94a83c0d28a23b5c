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

# What a bare Debian/Ubuntu machine lacks for the README's two commands.
#   dgxspark_prerequisites          what the toolchain needs (python3 with venv)
#   dgxspark_prerequisites cluster  also what the simulated cluster needs, and a
#                                   Docker daemon that answers
# As root where apt-get is, it installs the missing packages and starts dockerd
# in the background (log: $DGXSPARK_DOCKERD_LOG), saying so; elsewhere it
# prints the commands that would, and returns 1.
dgxspark_prerequisites() {
  local need=() python=${DGXSPARK_SIM_PYTHON:-python3.11} sudo=sudo can_install=false
  [ "$(id -u)" = 0 ] && sudo=
  [ -z "$sudo" ] && command -v apt-get >/dev/null && can_install=true
  command -v python3 >/dev/null || need+=(python3)
  # venv, and ensurepip in it: the toolchain's venv and ansible-test's.
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  if [ "${1:-}" = cluster ]; then
    command -v ssh-keygen >/dev/null || need+=(openssh-client)
    command -v rsync >/dev/null || need+=(rsync)
    command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
    command -v gpg >/dev/null || need+=(gnupg)
    command -v dpkg-scanpackages >/dev/null || need+=(dpkg-dev)
    command -v iptables >/dev/null || need+=(iptables)
    command -v dockerd >/dev/null || need+=(docker.io)
    # The engine stand-in's runtime is installed with pip for a CPython 3.11.
    if ! command -v "$python" >/dev/null; then
      need+=(python3.11 python3-pip)
    elif ! "$python" -m pip --version >/dev/null 2>&1; then
      need+=(python3-pip)
    fi
  fi
  if [ ${#need[@]} -gt 0 ]; then
    if ! $can_install; then
      echo "tools: missing prerequisites (${need[*]}); install them with:" >&2
      command -v apt-get >/dev/null || echo "  (on Debian/Ubuntu; elsewhere your system's packages of the same names)" >&2
      echo "  ${sudo:+$sudo }apt-get update && ${sudo:+$sudo }apt-get install -y ${need[*]}" >&2
      return 1
    fi
    echo "tools: installing missing prerequisites: apt-get install -y ${need[*]}" >&2
    apt-get update -qq >&2 || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 || {
      echo "tools: apt-get install failed; python3.11 is not packaged on every release: install a CPython 3.11 and set DGXSPARK_SIM_PYTHON to it" >&2
      return 1; }
  fi
  [ "${1:-}" = cluster ] || return 0
  docker info >/dev/null 2>&1 && return 0
  local log=${DGXSPARK_DOCKERD_LOG:-/var/log/dgxspark-dockerd.log} wait=${DGXSPARK_DOCKERD_WAIT:-60}
  if [ -n "$sudo" ]; then
    echo "tools: no Docker daemon answers; start one (or ask for access to it):" >&2
    echo "  sudo sh -c 'dockerd >$log 2>&1 &'" >&2
    return 1
  fi
  echo "tools: no Docker daemon answers; starting dockerd in the background (log: $log)" >&2
  # setsid: the daemon outlives this script and does not get its signals.
  # It gets no descriptor beyond the three standard ones either (a caller's
  # lock, e.g. flock 9>file, would be held as long as the daemon runs).
  (for fd in "/proc/$BASHPID/fd"/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
   exec setsid dockerd >"$log" 2>&1 < /dev/null) &
  while [ "$wait" -gt 0 ]; do
    docker info >/dev/null 2>&1 && { echo "tools: dockerd answers" >&2; return 0; }
    sleep 1
    wait=$((wait - 1))
  done
  echo "tools: dockerd did not answer within ${DGXSPARK_DOCKERD_WAIT:-60} s; the end of $log:" >&2
  tail -n 20 "$log" >&2
  return 1
}

dgxspark_require_docker() {
  if ! docker info >/dev/null 2>&1; then
    echo "tools: no Docker daemon answers; start dockerd (see README, Prerequisites)" >&2
    exit 1
  fi
}

# The node image, and what the simulated cluster's engine needs (the vLLM CPU
# runtime, the tiny model, the engine image stand-ins): each is built once and
# reused while its inputs are unchanged. The two are independent and built at
# once: on a fresh machine the node image's mmdebstrap runs while the vLLM
# runtime is fetched and unpacked.
dgxspark_node_image() {
  local assets
  "$DGXSPARK_ROOT/tools/sim-assets" all &
  assets=$!
  DGXSPARK_NODE_IMAGE=$("$DGXSPARK_ROOT/tools/node-image") || { wait "$assets"; return 1; }
  export DGXSPARK_NODE_IMAGE
  wait "$assets" || return 1
  dgxspark_sim_ssh
}

# The simulated nodes Molecule created that are not running as prepared, one
# name a line: after the Docker daemon restarted (a reboot), a `docker
# restart`, or a node stopped or removed by hand, Molecule still counts them as
# created and prepared and would skip both steps, leaving playbooks to fail
# with "No route to host" or on an unprepared node. Prepare's last play leaves
# /run/dgxspark-sim-prepared (a tmpfs) on every node it finished.
dgxspark_sim_nodes_down() {
  local name created
  molecule list -s cluster -f plain 2>/dev/null | while read -r name _ _ _ created _; do
    [ "$created" = true ] || continue
    if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" != true ] \
      || ! docker exec "$name" test -e /run/dgxspark-sim-prepared 2>/dev/null; then
      echo "$name"
    fi
  done
}

# Recreates the simulated cluster when any node Molecule created is down or
# restarted: what prepare and site.yml gave a node (its renamed fabric port,
# its engine) does not survive a restart, so starting it again would not
# give a converged node.
dgxspark_sim_recreate_down_nodes() {
  local down
  down=$(dgxspark_sim_nodes_down)
  [ -n "$down" ] || return 0
  echo "tools: simulated nodes down or restarted since prepared (${down//$'\n'/ }); removing the cluster to create it again" >&2
  molecule destroy -s cluster
}

# The simulated nodes are reached over SSH, as real ones: the controller's
# key and the nodes' host key are made once under .cache/simulation/ssh/
# (node/ is mounted into every node at /etc/ssh/dgxspark-sim), and the
# inventory learns their absolute paths from a generated group_vars file.
dgxspark_sim_ssh() {
  local dir="$DGXSPARK_ROOT/.cache/simulation/ssh"
  local vars="$DGXSPARK_ROOT/inventory/simulated/group_vars/dgxspark_cluster/generated_ssh.yml"
  mkdir -p "$dir/node"
  chmod 0755 "$dir" "$dir/node"
  if [ ! -s "$dir/id_ed25519" ] || [ ! -s "$dir/node/ssh_host_ed25519_key" ]; then
    echo "tools: making the simulated cluster's SSH keys under $dir" >&2
    rm -f "$dir/id_ed25519" "$dir/id_ed25519.pub" "$dir/node/ssh_host_ed25519_key" "$dir/node/ssh_host_ed25519_key.pub"
    ssh-keygen -q -t ed25519 -N '' -C dgxspark-sim-controller -f "$dir/id_ed25519"
    ssh-keygen -q -t ed25519 -N '' -C dgxspark-sim-node -f "$dir/node/ssh_host_ed25519_key"
  fi
  cp "$dir/id_ed25519.pub" "$dir/node/authorized_keys"
  chmod 0644 "$dir/node/authorized_keys"
  chmod 0600 "$dir/id_ed25519" "$dir/node/ssh_host_ed25519_key"
  # One host key for the simulated management network, checked strictly.
  echo "192.168.99.* $(cut -d' ' -f1,2 "$dir/node/ssh_host_ed25519_key.pub")" > "$dir/known_hosts"
  cat > "$vars" <<VARS
# Generated by tools/lib.sh (dgxspark_sim_ssh): where this checkout keeps the
# simulated cluster's SSH key and known host key, and the checkout itself (the
# simulated inventory's files and reports live there, wherever Molecule links
# the inventory from).
sim_checkout_dir: $DGXSPARK_ROOT
ansible_ssh_private_key_file: $dir/id_ed25519
ansible_ssh_common_args: -o UserKnownHostsFile=$dir/known_hosts -o StrictHostKeyChecking=yes
VARS
}

# Passes Molecule's output through unchanged and appends one line per action
# it runs ("converge 242") to the file $1: Molecule says "<scenario> ➜ <action>:
# Executing" when an action starts and "...: Executed: ..." when it ends, each
# word maybe coloured. tools/test prints the file in its summary, so the suite's
# budget shows where its longest part goes.
dgxspark_molecule_action_times() {
  local line plain action started=$SECONDS
  # Only the log lines (INFO): the recap at the end repeats "Executed" without it.
  local begins='^INFO +[^ ]+ ➜ ([a-z_]+): Executing$' ends='^INFO +[^ ]+ ➜ ([a-z_]+): Executed'
  shopt -s extglob
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s\n' "$line"
    plain=${line//$'\e'\[*([0-9;])m/}
    if [[ $plain =~ $begins ]]; then
      started=$SECONDS
    elif [[ $plain =~ $ends ]]; then
      action=${BASH_REMATCH[1]}
      printf '%s %d\n' "$action" $((SECONDS - started)) >> "$1"
    fi
  done
}
