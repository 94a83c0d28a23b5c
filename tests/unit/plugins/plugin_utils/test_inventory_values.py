# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
import yaml

from unit_support import REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import (
    argv_secret_problems,
    env_secret_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_inputs import declared_inputs
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_values import (
    VALUE_RULES,
    agreement_problems,
    cluster_wide_inputs,
    value_problems,
)

SPECS = {path.parts[-3]: yaml.safe_load(path.read_text()) for path in REPO_ROOT.glob("roles/*/meta/argument_specs.yml")}
DECLARED = declared_inputs(SPECS)
DIGEST = "sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"
SECRET = "sk-do-not-print-0123"

# The weights directory: the sync (rsync --delete) empties it of everything else.
REFUSED_WEIGHTS_DIRS = [
    ("/", "the root"), ("/home", "1 level deep"), ("/home/user", "2 levels deep"), ("/root", "1 level deep"),
    ("/srv", "1 level deep"), ("/opt", "1 level deep"), ("/var", "1 level deep"), ("/mnt", "1 level deep"),
    ("/media", "1 level deep"), ("/srv/models", "2 levels deep"), ("/data/models", "2 levels deep"),
    ("/usr", "outside the system tree /usr"), ("/etc", "outside the system tree /etc"),
    ("/tmp", "outside the system tree /tmp"), ("/usr/local/models/tiny", "outside the system tree /usr"),
    ("/tmp/models/tiny", "outside the system tree /tmp"), ("/var/lib/docker/models", "outside the system tree "
                                                           "/var/lib/docker"),
    ("/srv/models/", "(/srv/models is how it is spelt normalised)"),
    ("/srv/models/../tiny", "(/srv/tiny is how it is spelt normalised)"),
    ("srv/models/tiny", "expected the model's own directory"),
]


@pytest.mark.parametrize("path, why", REFUSED_WEIGHTS_DIRS, ids=[case[0] for case in REFUSED_WEIGHTS_DIRS])
def test_a_weights_directory_that_is_not_the_models_own_is_refused(path, why):
    problems = value_problems("spark2", {"model_weights_dir": path})
    assert len(problems) == 1
    assert problems[0].startswith("spark2: model_weights_dir is %s; expected the model's own directory, an absolute "
                                  "normalised path at least 3 levels deep" % path), problems
    assert why in problems[0]
    assert problems[0].endswith("Set model_weights_dir to a directory only the weights live in.")


@pytest.mark.parametrize("path", ["/srv/models/tiny-model", "/srv/models/DeepSeek-V4-Flash", "/home/user/models",
                                  "/data/models/deepseek", "/var/lib/dgxspark/weights"])
def test_a_dedicated_weights_directory_passes(path):
    assert value_problems("spark1", {"model_weights_dir": path}) == []


@pytest.mark.parametrize("name, value, expected", [
    ("model_weights_hf_repo_id", "deepseek-ai", "spark2: model_weights_hf_repo_id is deepseek-ai; expected a Hub "
     "repository id, namespace/name. Set model_weights_hf_repo_id to the repository the weights come from."),
    ("model_weights_hf_repo_id", "", "spark2: model_weights_hf_repo_id is empty;"),
    ("model_weights_hf_endpoint", "huggingface.co", "spark2: model_weights_hf_endpoint is huggingface.co; expected an "
     "http(s) URL (https://huggingface.co or a Hub mirror). Set model_weights_hf_endpoint to the URL the nodes "
     "download from."),
])
def test_a_weights_source_of_the_wrong_form_is_refused(name, value, expected):
    problems = value_problems("spark2", {name: value})
    assert len(problems) == 1 and problems[0].startswith(expected), problems


# Docker's reference grammar in its digest-pinned form.
REFUSED_REFS = [
    ("registry.io/Vllm/engine@" + DIGEST, "is not a valid image name (lowercase path components"),
    ("registry.io/vllm/en gine@" + DIGEST, "is not a valid image name"),
    ("registry.io/vllm/engine!@" + DIGEST, "is not a valid image name"),
    ("registry.io/vllm/engine:-bad@" + DIGEST, "is not a valid image name"),
    ("registry.io/vllm/engine:t\u00e4g@" + DIGEST, "is not a valid image name"),
    ("registry.io/vllm/engine:" + "t" * 129 + "@" + DIGEST, "is not a valid image name"),
    ("registry.io/vllm/engine@sha256:0123", "the digest 'sha256:0123' is not sha256: followed by 64 lowercase hex"),
    ("registry.io/vllm/engine@sha256:" + "A" * 64, "is not sha256: followed by 64 lowercase hex digits"),
    ("registry.io/vllm/engine:1.0", "is not pinned by digest"),
    ("registry.io/" + "a" * 250 + "@" + DIGEST, "the name is longer than the 255 characters Docker allows"),
]


@pytest.mark.parametrize("ref, why", REFUSED_REFS, ids=range(len(REFUSED_REFS)))
def test_an_image_reference_outside_dockers_grammar_is_refused(ref, why):
    problems = value_problems("spark2", {"engine_image_ref": ref})
    assert len(problems) == 1
    assert problems[0].startswith("spark2: engine_image_ref is %s; expected a digest-pinned reference" % ref)
    assert why in problems[0], problems
    assert "Set engine_image_ref to the RepoDigests entry of the image you tested" in problems[0]


@pytest.mark.parametrize("ref", ["192.168.99.5:5000/dgxspark/vllm-sim@" + DIGEST, "nvcr.io/nvidia/vllm:25.11-py3@" + DIGEST,
                                 "Registry.Example.io:5000/a/b__c/d-e@" + DIGEST, "localhost/engine@" + DIGEST,
                                 "vllm/vllm-openai:v0.11.0@" + DIGEST])
def test_an_image_reference_in_dockers_grammar_passes(ref):
    assert value_problems("spark1", {"engine_image_ref": ref}) == []


API_KEY_HOME = "the API key in engine_service_api_key, vault-encrypted"
HF_TOKEN_HOME = "the Hub token in model_weights_hf_token, vault-encrypted"
NO_SECRET = "no secret here (the collection's secrets are engine_service_api_key and model_weights_hf_token"

SECRET_ARGV = [
    ("engine_service_extra_args", ["--dtype", "float32", "--api-key", SECRET], 2, "--api-key", API_KEY_HOME),
    ("engine_service_extra_args", ["--api-key=" + SECRET], 0, "--api-key", API_KEY_HOME),
    ("engine_service_extra_args", ["--api_key", SECRET], 0, "--api_key", API_KEY_HOME),
    ("engine_service_extra_args", ["--hf-token", SECRET], 0, "--hf-token", HF_TOKEN_HOME),
    ("engine_service_container_extra_args", ["-e", "HF_TOKEN=" + SECRET], 1, "HF_TOKEN", HF_TOKEN_HOME),
    ("engine_service_container_extra_args", ["-eHUGGING_FACE_HUB_TOKEN=" + SECRET], 0, "HUGGING_FACE_HUB_TOKEN",
     HF_TOKEN_HOME),
    ("engine_service_container_extra_args", ["--env=NGC_API_KEY=" + SECRET], 0, "NGC_API_KEY", NO_SECRET),
    ("engine_service_container_extra_args", ["--env", "NGC_CLI_API_KEY=" + SECRET], 1, "NGC_CLI_API_KEY", NO_SECRET),
    ("engine_service_container_extra_args", ["--env", "VLLM_API_KEY=" + SECRET], 1, "VLLM_API_KEY", API_KEY_HOME),
    ("engine_service_container_extra_args", ["-e", "NGC_KEY=" + SECRET], 1, "NGC_KEY", NO_SECRET),
    ("engine_service_extra_args", ["--token", SECRET], 0, "--token", NO_SECRET),
    ("bench_community_extra_args", ["--api-key", SECRET], 0, "--api-key", API_KEY_HOME),
    ("bench_community_extra_args", ["--password=" + SECRET], 0, "--password", NO_SECRET),
    ("host_hardening_earlyoom_extra_args", ["WEBHOOK_SECRET=" + SECRET], 0, "WEBHOOK_SECRET", NO_SECRET),
]


@pytest.mark.parametrize("variable, argv, position, found, home", SECRET_ARGV, ids=range(len(SECRET_ARGV)))
def test_a_secret_in_free_form_arguments_is_refused_without_its_value(variable, argv, position, found, home):
    problems = value_problems("spark2", {variable: argv})
    assert len(problems) == 1, problems
    assert problems[0].startswith("spark2: %s[%d] holds %s, a secret, on a command line (its value is not repeated "
                                  "here): a command line is written into the node's unit and shown by ps and "
                                  "ansible-playbook -v; expected: %s" % (variable, position, found, home)), problems
    assert SECRET not in problems[0]
    assert problems[0].endswith("Remove it and its value, and set it there." if home != NO_SECRET
                                else "Remove it and its value.")


@pytest.mark.parametrize("argv", [
    ["--dtype", "float32", "--enforce-eager", "--max-num-batched-tokens", "32", "--tokenizer", "/models/tiny",
     "--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl", "--ssl-keyfile", "/etc/key.pem", "-O3"],
    ["-e", "HF_HUB_OFFLINE=1", "--env=HF_HUB_DISABLE_IMPLICIT_TOKEN=1", "--tokens=4"],
    "--api-key not a list: the role's spec names the type",
])
def test_arguments_without_secrets_pass(argv):
    assert argv_secret_problems("engine_service_extra_args", argv) == []


# Values shaped like a credential, under any name: the same detector reads them in arguments.
SHAPED = [
    ("hf_" + "Ab1" * 10, "a Hugging Face token (hf_...)", HF_TOKEN_HOME),
    ("nvapi-" + "x1Y" * 10, "an NGC API key (nvapi-...)", NO_SECRET),
    ("http://proxyuser:Passw0rd@proxy.example:3128", "a URL with a password (user:password@host)", NO_SECRET),
    ("ghp_" + "a1" * 18, "a GitHub token", NO_SECRET),
    ("AKIA" + "ABCDEFGH12345678", "an AWS access key", NO_SECRET),
]


@pytest.mark.parametrize("value, kind, home", SHAPED, ids=range(len(SHAPED)))
def test_a_value_shaped_like_a_credential_in_arguments_is_refused_without_it(value, kind, home):
    problems = value_problems("spark2", {"engine_service_extra_args": ["--dtype", "float32", "--download-dir", value]})
    assert len(problems) == 1, problems
    assert problems[0].startswith("spark2: engine_service_extra_args[3] holds a value shaped like %s, a secret, on a "
                                  "command line (its value is not repeated here)" % kind), problems
    assert "expected: %s" % home in problems[0] and value not in problems[0]


ENV_HOMES = {
    "VLLM_API_KEY": "the API key in engine_service_api_key, vault-encrypted (it reaches vLLM as VLLM_API_KEY through a "
                    "root-only file). Move it there.",
    "HF_TOKEN": "the Hub token in model_weights_hf_token, vault-encrypted (the collection fetches the weights with it; "
                "the engine reads them from disk). Move it there.",
    "NGC_API_KEY": "no secret in the environment (the engine's only secret is engine_service_api_key, "
                   "vault-encrypted). Remove it.",
    "WANDB_API_KEY": "no secret in the environment (the engine's only secret is engine_service_api_key, "
                     "vault-encrypted). Remove it.",
    "DB_PASSWORD": "no secret in the environment (the engine's only secret is engine_service_api_key, "
                   "vault-encrypted). Remove it.",
}


@pytest.mark.parametrize("variable", ["engine_service_env", "roce_fabric_nccl_extra_env", "roce_fabric_nccl_base_env"])
@pytest.mark.parametrize("name", sorted(ENV_HOMES))
def test_a_secret_named_in_an_environment_is_refused_per_host_without_its_value(variable, name):
    problems = value_problems("spark3", {variable: {"HF_HUB_OFFLINE": "1", name: SECRET}})
    assert problems == ["spark3: %s holds %s, a secret, in plain environment: the environment is written into every "
                        "rank's version and shown by ansible-playbook -v; expected: %s" % (variable, name, ENV_HOMES[name])]


@pytest.mark.parametrize("value, kind, home", SHAPED, ids=range(len(SHAPED)))
def test_a_value_shaped_like_a_credential_in_an_environment_is_refused_without_it(value, kind, home):
    problems = value_problems("spark3", {"engine_service_env": {"HTTPS_PROXY_OR_ANY": value, "OMP_NUM_THREADS": "4"}})
    assert len(problems) == 1, problems
    assert problems[0].startswith("spark3: engine_service_env holds HTTPS_PROXY_OR_ANY, whose value is shaped like %s, "
                                  "a secret, in plain environment" % kind), problems
    assert value not in problems[0] and SECRET not in problems[0]
    assert ("expected: %s" % home.partition(" (")[0]) in problems[0] if home == HF_TOKEN_HOME else \
        "expected: no secret in the environment" in problems[0]


@pytest.mark.parametrize("env", [
    {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "OMP_NUM_THREADS": 4, "NCCL_IB_TIMEOUT": "22",
     "HTTPS_PROXY": "http://proxy.example:3128", "VLLM_LOGGING_PREFIX": "rank-0", "TOKENIZERS_PARALLELISM": "false",
     "HF_HOME": "/srv/models/hf_home", "MAX_TOKENS": "4096"},
    "not a mapping: the role's check names the type",
    {},
])
def test_an_environment_without_secrets_passes(env):
    assert env_secret_problems("engine_service_env", env) == []
    assert value_problems("spark1", {"engine_service_env": env}) == []


def _role_defaults():
    defaults = {}
    for path in REPO_ROOT.glob("roles/*/defaults/main.yml"):
        defaults.update(yaml.safe_load(path.read_text()) or {})
    return defaults


def test_every_plain_default_passes_its_value_rule():
    defaults = {name: value for name, value in _role_defaults().items()
                if name in VALUE_RULES and not (isinstance(value, str) and "{{" in value)}
    # The repository id's default is empty: an inventory must name one.
    defaults.pop("model_weights_hf_repo_id")
    assert set(defaults) >= {"model_weights_hf_endpoint", "engine_service_extra_args", "bench_community_extra_args",
                             "engine_service_env", "roce_fabric_nccl_base_env", "roce_fabric_nccl_extra_env"}
    assert value_problems("default", defaults) == []
    # The weights directory's default, as the role resolves it for the sample's repository.
    assert value_problems("default", {"model_weights_dir": "/srv/models/DeepSeek-V4-Flash"}) == []


@pytest.mark.parametrize("inventory", ["sample", "simulated"])
def test_the_shipped_inventories_pass_the_value_rules(inventory):
    merged = {}
    for path in sorted((REPO_ROOT / "inventory" / inventory / "group_vars").glob("dgxspark_cluster/*.yml")):
        merged.update(yaml.load(path.read_text(), Loader=_VaultLoader) or {})
    values = {name: value for name, value in merged.items()
              if name in VALUE_RULES and not (isinstance(value, str) and "{{" in value)}
    # The sample's image reference is a placeholder of the right form (refused as a placeholder instead).
    assert "model_weights_dir" in values and "engine_service_extra_args" in values
    assert value_problems("spark1", values) == []


class _VaultLoader(yaml.SafeLoader):
    pass


_VaultLoader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


# Every host of the cluster on one value of what is one thing for the whole cluster.
HOSTS = ["spark1", "spark2", "spark3", "spark4"]
DEFAULTS = {"engine_service_max_num_seqs": 16, "engine_service_extra_args": ["--disable-custom-all-reduce"]}


def _cluster(**overrides):
    values = {host: {"engine_service_max_num_seqs": 4, "model_weights_hf_revision": "main"} for host in HOSTS}
    for host, host_values in overrides.items():
        values[host] = dict(values[host], **host_values)
    return values


def test_one_hosts_override_of_a_cluster_wide_input_is_refused_naming_the_hosts():
    problems = agreement_problems(_cluster(spark2={"engine_service_max_num_seqs": 8}), cluster_wide_inputs(), DEFAULTS,
                                  "dgxspark_cluster")
    assert problems == [
        "spark2: engine_service_max_num_seqs is 8, but 4 on spark1, spark3 and spark4; expected one value on every "
        "host of dgxspark_cluster (one engine runs one image, model and command line). Set it once for the group in "
        "group_vars, or the same on every host."]


def test_a_host_that_leaves_a_cluster_wide_input_out_has_its_default():
    values = {host: {} for host in HOSTS}
    values["spark3"] = {"engine_service_max_num_seqs": 16, "model_weights_hf_revision": "abc1234"}
    problems = agreement_problems(values, cluster_wide_inputs(), DEFAULTS, "dgxspark_cluster")
    # 16 is the default: the same value. The revision has no plain default: not set elsewhere.
    assert problems == [
        "spark3: model_weights_hf_revision is abc1234, but not set on spark1, spark2 and spark4; expected one value on "
        "every host of dgxspark_cluster (one engine runs one image, model and command line). Set it once for the "
        "group in group_vars, or the same on every host."]


def test_a_list_that_differs_is_named_without_its_items():
    values = _cluster(spark4={"engine_service_extra_args": ["--api-key", SECRET]})
    problems = agreement_problems(values, cluster_wide_inputs(), DEFAULTS, "dgxspark_cluster")
    assert problems == [
        "spark4: engine_service_extra_args differs from its value on spark1, spark2 and spark3 (not repeated here); "
        "expected one value on every host of dgxspark_cluster (one engine runs one image, model and command line). "
        "Set it once for the group in group_vars, or the same on every host."]


def test_hosts_that_agree_pass_and_a_tie_goes_to_the_first_hosts_value():
    assert agreement_problems(_cluster(), cluster_wide_inputs(), DEFAULTS, "dgxspark_cluster") == []
    values = _cluster(spark3={"model_weights_hf_revision": "v2"}, spark4={"model_weights_hf_revision": "v2"})
    problems = agreement_problems(values, cluster_wide_inputs(), DEFAULTS, "g")
    assert len(problems) == 1 and problems[0].startswith(
        "spark3 and spark4: model_weights_hf_revision is v2, but main on spark1 and spark2;")


def test_every_engine_setting_and_the_image_and_weights_source_are_cluster_wide():
    shared = cluster_wide_inputs()
    assert {"engine_service_tensor_parallel_size", "engine_service_extra_args", "engine_service_patches",
            "engine_image_ref", "model_weights_hf_repo_id", "model_weights_hf_revision"} <= set(shared)
    assert all(name in DECLARED for name in shared), [name for name in shared if name not in DECLARED]
    # Per host by nature: the rank, the weights directory, the container's settings.
    assert not {"engine_service_rank", "model_weights_dir", "engine_service_env"} & set(shared)
