"""Judges every host of the run at once, on the controller, before any host changes (preflight/).

Why one task for all hosts: each Ansible task costs the controller a fork per host; preflight's
host checks were 15 tasks per host (at 200 hosts, minutes of controller time for asserts). Here
one run_once task reads each host's probe (registered by ``rollout_probe``) and variables from
``hostvars`` and applies preflight/rules.py. A refusal fails this task and, with it, every host of
the play: nothing changes anywhere, and the message lists each distinct refusal once with its hosts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# the bundle's packages: an action plugin is loaded when its task starts, and a failed import there
# reads as "Unexpected Exception, this is probably a bug" with a traceback; this says what to do
try:
    import preflight
    from preflight import cubins
except ImportError as exc:  # ansible-playbook from outside the bundle's virtualenv
    raise AnsibleError(
        f"ansible-playbook runs on a Python without the bundle's packages ({exc}): activate the bundle's "
        "virtualenv (. .venv/bin/activate; bash scripts/setup.sh makes it) and run it again"
    ) from None

DOCUMENTATION = """
module: rollout_preflight
short_description: judge every host's probe and settings before any host changes
options:
  hosts: {description: the hosts to judge (the play's), required: true, type: list, elements: str}
  probe: {description: the name every host registered its rollout_probe result under, required: true, type: str}
  roles_dir: {description: the roles whose specs and defaults name and type the variables, required: true, type: path}
"""

ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "probe": {"type": "str", "required": True},
    "roles_dir": {"type": "path", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)  # Ansible's own errors
        specs = preflight.specs.load(Path(args["roles_dir"]))
        hostvars = task_vars["hostvars"]
        refusals: dict[str, list[preflight.Refusal]] = {}
        for host in args["hosts"]:
            hv = hostvars[host]
            probe = preflight.parse_probe(hv.get(args["probe"]))
            settings, invalid = preflight.Settings.from_vars(hv, specs)
            unknown = preflight.unknown_variables(hv.keys(), specs.known)
            found = preflight.judge_host(settings, probe, unknown, invalid)
            # the image's own rule, where its labels are known before any pull (an archive on the controller)
            image = cubins.preflight_refusal(host, hv, settings.gpu_arch, settings.offline)
            found += [preflight.Refusal("flashinfer_cubins", image)] if image and not probe.unreachable else []
            if found:
                refusals[host] = found
        result.update(changed=False, refused={h: [r.message for r in rs] for h, rs in refusals.items()})
        # the roles' settings checks run on one host per distinct set of settings (preflight/settings.py)
        groups = preflight.representatives(args["hosts"], hostvars)
        result["settings_hosts"] = {h: len(m) for h, m in groups.items()}
        if refusals:
            result.update(failed=True, msg=message(refusals, len(args["hosts"])))
        else:
            result["msg"] = (
                f"All {len(args['hosts'])} hosts passed preflight's host checks; {len(groups)} distinct set(s) of "
                "settings, each checked on its first host."
            )
        return result


def message(refusals: dict[str, list[preflight.Refusal]], total: int) -> str:
    unreached = [h for h, rs in refusals.items() if any(r.rule == "reachable" for r in rs)]
    head = f"Preflight refused {len(refusals)} of {total} hosts: nothing was changed on any host."
    if unreached:
        head = (
            f"Preflight could not reach {', '.join(unreached)} (SSH, or the connection failed): nothing was changed on "
            f"any host. Fix the connection, or leave them out of this run with --limit '!{unreached[0]}'."
        )
    return "\n".join([head, *preflight.group_refusals(refusals)])
