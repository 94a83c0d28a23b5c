#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Converge a set of directories, files and symlinks in one task
version_added: "0.1.0"
description:
  - Puts a whole set of directories, text files and symlinks in place in one round trip, where one task per path
    would take one round trip each.
  - Every path is inspected (C(lstat), and reading files of the right size) before anything is written. A set that
    cannot be applied as given is refused with one message naming each path at fault, what was found and what is
    expected, and nothing is written. Refused are relative paths, a path listed twice, a mode that is not an octal
    string, an owner or group this node does not know, content that is not text, a path where something of
    another kind exists (a directory where a file is listed, a file or directory where a link is listed, a symlink
    where a file or directory is listed), a file or link whose directory neither exists nor is listed, and a path
    beneath a listed file or passing through a listed link.
  - Missing directories are created with their parents. A missing parent that is not listed itself gets the mode,
    owner and group of the listed directory beneath it. A new directory is created owner-only and gets its owner
    and mode before anything is put in it.
  - A file is written only when its content differs, and atomically; a temporary file in the same directory gets
    the content, the owner and the mode and is flushed to disk before it is renamed over the path, so a reader
    sees the old file or the new one, never a part. A file replaced without O(files[].owner) or O(files[].group)
    keeps the owner or group it had.
  - An existing directory or file whose content is right but whose mode, owner or group differs is fixed in
    place.
  - A symlink pointing elsewhere is replaced atomically by a temporary symlink beside it renamed over it, so the
    path never goes missing.
  - A file may name a O(files[].validate) command. Before anything of the set is created or replaced, each file
    created or changed is checked by its command on the new content in a private temporary directory; when one
    fails, the task fails naming the file, the command, its exit code and what it printed, and nothing of the set
    is written, not even the files whose check passed.
  - Directories are converged first (shallowest first), then files, then links.
  - Nothing is ever removed; paths on the node that the set does not list are left alone.
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - The disk is inspected and RV(changed_paths) and RV(reasons) say what would change; nothing is written.
      - O(files[].validate) does not run in check mode, as with M(ansible.builtin.template); a command may need
        what earlier tasks, skipped in check mode, would install (the unit a drop-in extends, a program).
  diff_mode:
    support: partial
    details:
      - The old and new text of each file created or changed, except secret files (O(files[].secret)) and files
        whose old content is not UTF-8 text. Mode, owner and link changes are reported in RV(reasons) only.
  platform:
    platforms: posix
options:
  directories:
    description: Directories that must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      mode:
        description:
          - Permissions as an octal string of 3 or 4 digits, V('0755') or V('2775'); quote it, since YAML reads
            an unquoted V(0755) as the number 493, which is refused.
        type: raw
        required: true
      owner:
        description: User name, or numeric uid. Left as it is when not given.
        type: str
      group:
        description: Group name, or numeric gid. Left as it is when not given.
        type: str
  files:
    description: Regular files and their text.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - Absolute path. Its directory must exist or be listed in O(directories).
        type: path
        required: true
      content:
        description:
          - The whole text of the file, written as UTF-8. An empty string makes an empty file.
          - Anything else than a string (a dict from a template without C(to_json), a number) is refused.
          - This suboption is C(no_log), see the notes.
        type: raw
        required: true
      mode:
        description: Permissions as an octal string, as for O(directories[].mode).
        type: raw
        required: true
      owner:
        description: User name, or numeric uid. Kept from the file being replaced when not given.
        type: str
      group:
        description: Group name, or numeric gid. Kept from the file being replaced when not given.
        type: str
      secret:
        description:
          - The content is a secret (a token, a key, an env file holding a password). It never appears in the
            result, the diff, a warning or an error message, and wherever the text occurs in the output it is
            replaced with asterisks.
          - When false the content is shown in the diff and the module arguments (C(-vvv)).
        type: bool
        default: false
      validate:
        description:
          - A command that checks the new content before the file is created or replaced, as for
            M(ansible.builtin.template); C(%s) stands for the path of the file to check and C(%%) for a C(%).
          - It is split into words as a shell would split it and run without a shell (use C(sh -c '...' sh %s) for
            one), with C(LC_ALL=C). It passes when it exits 0.
          - It runs only for a file created or whose content changes, never for a file left as it is or whose mode
            or owner alone changes, and not in check mode.
          - The file to check is a copy of the new content, with the file's mode, under its own name in a private
            temporary directory removed afterwards; the files of one directory of the set that have a
            O(files[].validate) are copied there side by side (changed or not), in a directory of the same name as
            theirs. So V(systemd-analyze verify %s) sees a unit's real name and finds another unit of the set
            beside it, and a drop-in sits in a directory named C(<unit>.d), whose parent can go on
            C(SYSTEMD_UNIT_PATH) to verify the unit with it.
          - Every command of the set runs before anything is written; when one fails, nothing is written and the
            task fails with RV(validation).
        type: str
  links:
    description: Symlinks.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - Absolute path of the link. Its directory must exist or be listed in O(directories). A regular file or
            a directory at this path is refused, never replaced.
        type: path
        required: true
      src:
        description:
          - What the link points to, stored as given (a relative O(links[].src) is resolved from the link's
            directory). It need not exist.
        type: str
        required: true
notes:
  - Secrets. Ansible's C(no_log) on a task hides the whole result (RV(changed_paths) included) from the output,
    so the module does not depend on it. O(files[].content) is declared C(no_log), which masks every file's
    content in the returned module arguments and in any text of the result; the module then unmasks the content
    of files that are not O(files[].secret), so that their diff can be shown. The module does not log its
    invocation to the node's journal, because C(ansible-core) logs nested options in a form where the masking
    misses text that spans lines.
  - What the module cannot cover is the controller. The task's arguments are templated there and travel to the
    node in the module's payload; a callback that prints task arguments (C(display_args_to_stdout)) or a kept
    payload (C(ANSIBLE_KEEP_REMOTE_FILES)) shows them. Where that matters, set C(no_log) to V(true) on the task; a
    registered result still holds RV(changed_paths) and RV(reasons).
  - Because secret text is masked wherever it occurs, a secret of a few characters also masks those characters
    in paths and in the diff of other files.
  - Paths are normalised (V(/srv//a/./b) is V(/srv/a/b)) and reported in that form.
  - SELinux contexts and ACLs are not managed.
seealso:
  - module: ansible.builtin.file
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Put the engine version's configuration in place
  dgxspark.cluster.file_set:
    directories:
      - {path: /etc/dgxspark/engine/v0.11.0, mode: "0755"}
      - {path: /var/lib/dgxspark/engine, mode: "0750", owner: vllm, group: vllm}
    files:
      - path: /etc/dgxspark/engine/v0.11.0/engine.yaml
        content: "{{ engine_config | to_nice_yaml }}"
        mode: "0644"
      - path: /etc/dgxspark/engine/v0.11.0/hf.env
        content: "HF_TOKEN={{ hf_token }}\n"
        mode: "0600"
        owner: root
        group: root
        secret: true
    links:
      - {path: /etc/dgxspark/engine/current, src: v0.11.0}
  register: engine_files
  notify: Restart the engine

- name: Write a unit, refused with nothing written when systemd-analyze finds fault with it
  dgxspark.cluster.file_set:
    files:
      - path: /etc/systemd/system/dgxspark-node-metrics.service
        content: "{{ lookup('dgxspark.cluster.role_template', 'dgxspark-node-metrics.service.j2') }}"
        mode: "0644"
        validate: systemd-analyze verify %s

- name: Say which files changed
  ansible.builtin.debug:
    msg: "{{ engine_files.changed_paths }}"
  when: engine_files is changed

- name: Keep the arguments off the controller's output too (the registered result still has changed_paths)
  dgxspark.cluster.file_set:
    files:
      - {path: /etc/dgxspark/registry-credentials, content: "{{ registry_credentials }}", mode: "0600", secret: true}
  no_log: true
  register: credentials
"""

RETURN = r"""
changed_paths:
  description:
    - Paths created or changed (in check mode, that would be), in the order given (O(directories), then O(files),
      then O(links)). A parent directory created for a listed one comes just before it.
  returned: always
  type: list
  elements: str
  sample:
    - /etc/dgxspark/engine/v0.11.0
    - /var/lib/dgxspark/engine
    - /etc/dgxspark/engine/v0.11.0/engine.yaml
    - /etc/dgxspark/engine/current
validation:
  description:
    - Only when the task failed because a O(files[].validate) command failed; one entry per failed command, with
      the file's C(path), the C(validate) command, its C(rc), C(stdout) and C(stderr). The first failure's C(rc),
      C(stdout) and C(stderr) are also returned at the top level.
  returned: failure
  type: list
  elements: dict
  sample:
    - path: /etc/systemd/system/dgxspark-node-metrics.service
      validate: systemd-analyze verify %s
      rc: 1
      stdout: ""
      stderr: "dgxspark-node-metrics.service: Command /usr/bin/python4 is not executable: No such file or directory"
reasons:
  description:
    - For each path of RV(changed_paths), why it changes, in this order; V(created) (it did not exist; then the
      only reason), V(content), V(mode), V(owner), V(group) or V(link) (a symlink that pointed elsewhere).
  returned: always
  type: dict
  sample:
    /etc/dgxspark/engine/v0.11.0: [created]
    /etc/dgxspark/engine/v0.11.0/engine.yaml: [created]
    /etc/dgxspark/engine/current: [link]
    /var/lib/dgxspark/engine: [mode, owner]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import (
    ApplyError,
    FileSetError,
    apply_file_set,
    changed_steps,
    diff_entries,
    plan_file_set,
    report,
    validate_file_set,
    validation_message,
)

ARGUMENT_SPEC = dict(
    directories=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(
            path=dict(type="path", required=True),
            mode=dict(type="raw", required=True),
            owner=dict(type="str"),
            group=dict(type="str"),
        ),
    ),
    files=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(
            path=dict(type="path", required=True),
            content=dict(type="raw", required=True, no_log=True),
            mode=dict(type="raw", required=True),
            owner=dict(type="str"),
            group=dict(type="str"),
            secret=dict(type="bool", default=False),
            validate=dict(type="str"),
        ),
    ),
    links=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(path=dict(type="path", required=True), src=dict(type="str", required=True)),
    ),
)


def show_public_content(module, files):
    """Every content is masked (no_log); unmask the text of files that are not secret so that
    their diff shows. A text that is also a secret file's content stays masked."""
    secret = {f["content"] for f in files if f["secret"] and isinstance(f["content"], str)}
    public = {f["content"] for f in files if not f["secret"] and isinstance(f["content"], str)}
    module.no_log_values.difference_update(public - secret)


def run_validation(module, argv):
    """rc, stdout and stderr of a validate command; a program that cannot be run is rc 127."""
    try:
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANGUAGE": "C"}, handle_exceptions=False)
    except OSError as exc:
        return 127, "", "cannot run %s: %s" % (argv[0], exc.strerror or exc)


def main():
    # no_log here only stops the "Invoked with" line in the node's journal, where ansible-core
    # writes nested options in a form that the no_log masking misses for multi-line text.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, no_log=True)
    p = module.params
    directories, files, links = p["directories"] or [], p["files"] or [], p["links"] or []
    show_public_content(module, files)
    result = dict(changed=False, changed_paths=[], reasons={})

    try:
        steps = plan_file_set(directories, files, links)
    except FileSetError as exc:
        module.fail_json(msg="refusing the file set, nothing was written: %s" % exc, **result)
    except OSError as exc:
        module.fail_json(msg="cannot inspect the file set: %s" % exc, **result)

    changes = changed_steps(steps)
    result.update(report(steps), changed=bool(changes))
    if module._diff:
        result["diff"] = diff_entries(steps)
    if changes and not module.check_mode:
        # Every check before anything is written; on a refusal nothing changed.
        try:
            failures = validate_file_set(steps, lambda argv: run_validation(module, argv))
        except OSError as exc:
            result.update(changed=False, changed_paths=[], reasons={})
            module.fail_json(msg="cannot check the file set, nothing was written: %s" % exc, **result)
        if failures:
            first = failures[0]
            result.update(changed=False, changed_paths=[], reasons={}, validation=failures, rc=first["rc"],
                          stdout=first["stdout"], stderr=first["stderr"])
            module.fail_json(msg="refusing the file set, nothing was written: %s" % validation_message(failures),
                             **result)
        try:
            apply_file_set(steps)
        except ApplyError as exc:
            done = set(exc.done)
            partial = [step for step in changes if step.path in done]
            result.update(report(partial), changed=bool(partial))
            module.fail_json(msg=str(exc), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
