"""Checks one role's settings: its argument spec (Ansible's validator), then its rules
(preflight/role_rules.py), every error in one message naming the variable.

Why an action plugin: the rules read many variables at once (one against another, files on the
controller) and need unit tests, which a list of Jinja expressions in tasks/validate.yml made hard
and repeated (each rule was written beside the same type and choice checks the argument spec
already makes). The role's variables are read the way Ansible's ``validate_argument_spec`` reads
them (each option of the role's ``validate`` entry point, templated), so the rules get the values
the spec typed. Runs on the controller, changes nothing, in check mode too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

# the bundle's packages: an action plugin is loaded when its task starts, and a failed import there
# reads as "Unexpected Exception, this is probably a bug" with a traceback; this says what to do
try:
    import preflight.role_rules
    import preflight.specs
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv
    raise AnsibleError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from None

DOCUMENTATION = """
module: settings_check
short_description: check one role's settings against its argument spec and its rules
options:
  role:
    description: the role
    type: str
    required: true
    choices: [gpu_host, sglang_image, flashinfer_cache, sglang_server, sglang_gate]
  context:
    description: values the role's rules read beside its variables (sglang_server - settings, sglang_version)
    type: dict
    default: {}
"""

ARGUMENT_SPEC = {
    "role": {"type": "str", "required": True, "choices": sorted(preflight.role_rules.ROLES)},
    "context": {"type": "dict", "default": {}},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        role = args["role"]
        specs = Path(task_vars["role_path"]) / "meta" / "argument_specs.yml"
        spec = preflight.specs.role_options(specs, "validate")
        given = self._templar.template({name: task_vars[name] for name in spec if name in task_vars})
        checked = ArgumentSpecValidator(spec).validate(given)
        errors = list(checked.error_messages)
        if not errors:  # the rules read typed values
            errors = preflight.role_rules.check(role, checked.validated_parameters, args["context"])
        result.update(changed=False, errors=errors)
        if errors:
            result.update(
                failed=True, msg=f"Invalid {role} settings for {task_vars['inventory_hostname']}: " + "; ".join(errors)
            )
        else:
            result["msg"] = f"{role}: settings valid"
        return result
